"""``gpusleuth load`` against a real CPU engine: ``transformers serve --continuous-batching`` serving a tiny
Llama built from a config with a tokenizer trained here (no hub download), beside an independent stdlib
streaming client (``tests/servers/stream_client.py``) — issue 26's "the load generator is the bottleneck".

Two measurements, because they answer two questions:

* **Throughput: both at once**, 2 streams each, the same request, the same seconds — the same engine,
  batches and host, so equal shares unless one client is the bottleneck: gpusleuth gets at least the stdlib
  client's requests/s (within the noise of two equal shares), on a fraction of a core.
* **Latency: each alone, interleaved (A B B A A B) at concurrency 1**: TTFT p50 and inter-token p50 within 10 %,
  or within the stdlib client's own spread between its runs where that is wider.
  Not at once: closed-loop clients sharing a continuous-batching engine lock into phases with its steps —
  each client's next request lands at its own point of the engine's step cycle — so their TTFT p50s differ
  by that phase, not by how they measure: two *stdlib* clients side by side read 6.5 vs 8.3 ms (27 %) on a
  quiet host, while alone at concurrency 1 the two clients agree within 2–5 % (docs in BENCHMARKS.md).

``benchmarks/llm_engine.py`` has the repeated versions of both.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import pytest

from conftest import free_port

REPO = Path(__file__).resolve().parent.parent
sys.path.append(str(REPO / "benchmarks"))


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
        alone = E.compare(url, str(model), tmp_path, 1, 4.0, 3, 16)  # s g g s s g: drift between runs cancels
    finally:
        E.stop_engine(proc)
    s, g = r["stdlib"], r["gpusleuth"]
    assert s["errors"] == g["errors"] == 0 and s["requests"] >= 10 and g["requests"] >= 10, r
    assert g["rps"] >= 0.9 * s["rps"], r  # equal shares of one engine: at least the stdlib client's, within noise
    assert g["cpu"] < 0.5, r  # the generator's own CPU: far from a core
    # what the report says is what it recorded (its own percentile of its own rows)
    assert g["ttft"] == pytest.approx(statistics.median(g["ttft_ms"]), rel=0.02, abs=0.05), r
    assert g["itl"] == pytest.approx(statistics.median(g["itl_ms"]), rel=0.02, abs=0.05), r
    sa, ga = alone["median"]["stdlib"], alone["median"]["gpusleuth"]
    # within 10 %, or within what the independent client differs from itself between its own runs: CI (2 cores,
    # load under 1 per core) read the stdlib client's TTFT p50 4.58, 5.79, 5.61 ms in three runs, gpusleuth's
    # 4.92, 5.34, 4.84 — 12 % apart by medians, inside the reference's own 23 % spread
    own = {k: (max(x[k] for x in alone["runs"]["stdlib"]) - min(x[k] for x in alone["runs"]["stdlib"])) / sa[k]
           for k in ("ttft", "itl")}
    close = all(ga[k] == pytest.approx(sa[k], rel=max(0.10, own[k])) for k in ("ttft", "itl"))
    if not close:
        load = os.getloadavg()[0] / (os.cpu_count() or 1)
        runs = {who: [(round(x["ttft"], 2), round(x["itl"], 2)) for x in rs] for who, rs in alone["runs"].items()}
        if load > 1:  # the engine's own speed drifts between runs on a busy host: measured, said, not asserted
            pytest.skip(f"TTFT/inter-token p50 (ms) of the two clients alone further apart than 10 % and the stdlib "
                        f"client's own spread on a host with load {load:.1f} per core: {runs}")
        pytest.fail(f"TTFT/inter-token p50 (ms) of the two clients alone further apart than 10 % and the stdlib "
                    f"client's own spread between runs: {runs}")
