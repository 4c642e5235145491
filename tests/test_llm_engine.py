"""``gpusleuth load`` against a real CPU engine: ``transformers serve --continuous-batching`` serving a tiny
Llama built from a config with a tokenizer trained here (no hub download), beside an independent stdlib
streaming client (``tests/servers/stream_client.py``) — issue 26's "the load generator is the bottleneck".

Both clients load the engine *at the same time*, 2 streams each, with the same request, for the same
seconds: they meet the same engine, batches and host, so what differs is the clients. TTFT p50 and
inter-token p50 agree within 10 % and gpusleuth gets at least the stdlib client's requests/s (within the
noise of two equal shares). ``benchmarks/llm_engine.py`` has the interleaved, repeated version.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import free_port

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))


@pytest.mark.slow
def test_against_transformers_serve_as_good_as_an_independent_client(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    pytest.importorskip("openai")  # transformers[serving]
    import llm_engine as E

    model = E.build_model(tmp_path / "tiny-llama")
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    log = tmp_path / "engine.log"
    proc = E.start_engine(model, port, log)
    try:
        warm = json.dumps({"model": str(model), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                           "stream": True}).encode()
        E.wait_engine(url, proc, warm, log)
        r = E.together(url, str(model), tmp_path, 2, 6.0, 16)
    finally:
        E.stop_engine(proc)
    s, g = r["stdlib"], r["gpusleuth"]
    assert s["errors"] == g["errors"] == 0 and s["requests"] >= 10 and g["requests"] >= 10, r
    assert g["rps"] >= 0.9 * s["rps"], r  # equal shares of one engine: at least the stdlib client's, within noise
    assert g["cpu"] < 0.5, r  # the generator's own CPU: far from a core
    close = g["ttft"] == pytest.approx(s["ttft"], rel=0.10) and g["itl"] == pytest.approx(s["itl"], rel=0.10)
    if not close:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
        if load > 2:  # both clients' wake-up delays on an overloaded host: measured, said, not asserted
            pytest.skip(f"TTFT/inter-token p50 of the two clients more than 10 % apart on a host with load "
                        f"{load:.1f} per core: {r}")
        pytest.fail(f"TTFT/inter-token p50 of the two clients more than 10 % apart: {r}")
