"""llama.cpp's own server, live on CPU (issue 26): its ``/metrics`` end to end through ``gpusleuth load``, and
every request's times held to a clock that is neither client's.

The engine is llama.cpp's C++ server as the ``xllamacpp`` wheel embeds it (``tests/servers/llama_server.py``;
the test extra installs it, no compiler), serving a tiny random Llama written here as GGUF
(``tests/servers/tiny_gguf.py``, no hub download).

* ``/metrics``: ``gpusleuth load … -- python llama_server.py …`` starts the engine with ``--metrics`` and two
  slots, loads it at concurrency 1 and 6, and scrapes it. What the engine counted must be what the client
  measured: its generated-token counter grew by exactly the output tokens of the requests gpusleuth recorded,
  its prompt counters (computed + cached) by exactly their input tokens, its seconds spent generating by the
  requests' first-to-last-token spans; per level, the requests it ran and deferred and its mean batch per
  decode step follow the concurrency against two slots.
* The clock (``tests/servers/stamp_proxy.py``): each request gpusleuth sent through a byte-level proxy has the
  proxy's stamps (joined on ``X-Request-Id``); gpusleuth's TTFT may only be longer, and its gaps must be the
  proxy's (``benchmarks/llm_proxy_clock.py`` holds the bound); a bias planted in the same requests fails it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, free_port

sys.path.append(str(REPO / "benchmarks"))
pytestmark = [pytest.mark.process, pytest.mark.slow]

SERVERS = REPO / "tests" / "servers"


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> Path:
    pytest.importorskip("xllamacpp", reason="llama.cpp's server comes with the test extra's xllamacpp wheel")
    pytest.importorskip("gguf", reason="the tiny model is written with the test extra's gguf package")
    import llm_proxy_clock as P

    return P.build_gguf(tmp_path_factory.mktemp("llama") / "tiny.gguf")


def _env() -> dict:
    from test_serving import _env

    return _env()


def test_llama_server_metrics_match_what_the_client_measured(tmp_path, gguf):
    from gpusleuth.serving.sources.engine_metrics import read_engine_scrapes
    import llm_proxy_clock as P

    port = free_port()
    run = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}/v1/completions", "--concurrency", "1,6",
         "--duration", "3", "--input-tokens", "24", "--output-tokens", "24", "--no-gpu", "--out", str(run),
         "--json", "--", sys.executable, str(SERVERS / "llama_server.py"), str(gguf), "--port", str(port),
         "--parallel", "2", "--metrics"],
        env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    rep = json.loads(res.stdout)
    em = rep["engine_metrics"]
    assert em is not None and em["engine"] == "llamacpp", rep.get("losses")
    one, six = em["levels"]
    assert one["concurrency"] == 1 and six["concurrency"] == 6 and one["scrapes"] >= 2 and six["scrapes"] >= 2

    # the engine's gauges, against what the load did: one request at a time; six on two slots, four deferred
    assert one["running_max"] == 1 and one["waiting_max"] == 0
    assert six["running_max"] == 2 and six["waiting_max"] >= 1, six
    # llama.cpp prints its running mean with 6 significant digits (1.17153 after 274 steps): the mean between two
    # scrapes carries that rounding times steps-since-start over steps-between (measured up to 3e-6 over 1.0)
    assert 0.9 <= one["batch_mean"] <= 1.0 + 1e-4, one
    assert 1.5 < six["batch_mean"] <= 2.0 + 1e-4, six
    assert one["kv_usage_mean"] is None  # this build has no KV-usage gauge: none is invented
    # and the report says so: requests waiting for a slot, the fix naming llama.cpp's --parallel
    cap = [f for f in rep["findings"] if f["cause"] == "serving.engine_capacity"]
    assert cap and "concurrency 6" in cap[0]["title"] and "--parallel" in json.dumps(cap[0]), rep["findings"]

    # the engine's counters over the whole load (first scrape, before any request, to the last, taken after
    # the levels ended and before the server was stopped) against the client's own rows, request by request
    samples, loss = read_engine_scrapes(run)
    assert loss is None and len(samples) >= 4
    first, last = samples[0].values, samples[-1].values
    rows = P.gpusleuth_rows(run)
    import pyarrow.parquet as pq

    every = pq.read_table(run / "load.parquet").to_pylist()
    assert len(rows) == len(every) > 20  # every request answered whole
    assert all(r["tokens_from"] == "usage" for r in rows)
    assert last["generation_tokens"] - first["generation_tokens"] == sum(r["output_tokens"] for r in rows)
    assert sum(len(r["token_ns"]) for r in rows) == sum(r["output_tokens"] for r in rows)  # one event a token
    prompt = (last["prompt_tokens"] + last["prompt_tokens_cached"]
              - first["prompt_tokens"] - first["prompt_tokens_cached"])
    assert prompt == sum(r["input_tokens"] for r in rows)
    # the seconds it spent generating: from each request's first token to its last, on its clock and ours
    engine_s = last["decode_seconds"] - first["decode_seconds"]
    client_s = sum((r["token_ns"][-1] - r["token_ns"][0]) / 1e9 for r in rows)
    assert client_s == pytest.approx(engine_s, rel=0.05), (client_s, engine_s)
    # its prompt seconds are inside the requests' TTFTs (which also hold the wait for a slot and the wire)
    assert last["prefill_seconds"] - first["prefill_seconds"] < sum((r["token_ns"][0] - r["start_ns"]) / 1e9
                                                                    for r in rows)
    # per level, its generated tokens/s against the client's own (scrapes a second apart: edges blur it)
    for lv, mine in zip(em["levels"], rep["serving"]["levels"]):
        assert lv["generation_tokens_per_s"] == pytest.approx(mine["tokens"]["output_tokens_per_s"], rel=0.25), (
            lv, mine["tokens"])

    # each answer's own timings (llama.cpp's `timings`), kept per request: its decode seconds sum to what its
    # /metrics counted, its prefill and decode fit inside the request's time on our clock, and what is outside
    # them — the wait for one of the two slots — grows from one client to six
    assert all(r["engine_prefill_ns"] >= 0 and r["engine_decode_ns"] >= 0 for r in every)
    assert sum(r["engine_decode_ns"] for r in rows) / 1e9 == pytest.approx(engine_s, rel=0.02)
    # (its prompt seconds are no such sum: 5.25 per request against 3.35 counted, once, in a CI-like run — a prompt
    # timed per slot while the other slot's steps ran in the same batches; 1 % apart in another run)
    assert all(r["engine_prefill_ns"] <= r["token_ns"][0] - r["start_ns"] for r in rows)  # prompt before 1st token
    assert all(r["engine_prefill_ns"] + r["engine_decode_ns"] <= r["end_ns"] - r["start_ns"] for r in rows)
    one_e, six_e = (lv["tokens"]["engine"] for lv in rep["serving"]["levels"])
    assert one_e["requests"] + six_e["requests"] == len(rows) and one_e["over_e2e"] == six_e["over_e2e"] == 0
    assert six_e["outside_share"] > one_e["outside_share"] + 0.2, (one_e, six_e)
    # and the sentence for a server no hook saw inside says the engine's own timings split its requests
    note = (rep.get("request_stages") or {}).get("note") or ""
    assert "were seen by no Python request handler" in note and "the engine's own timings" in note, note


def _same_level(tmp_path, gguf, name: str, *more: str) -> tuple[dict, list[list[float]]]:
    """Concurrency 1 four times (one slot) against llama.cpp's server with its prompt cache, prompts of 150 synthetic
    words (≈ 800 of this model's character tokens: a prefill of about 100 ms here): the report and each level's
    TTFTs (ms)."""
    import llm_proxy_clock as P

    port = free_port()
    res = subprocess.run(
        [sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}/v1/completions", "--concurrency",
         "1,1,1,1", "--duration", "2", "--input-tokens", "150", "--output-tokens", "2", "--no-gpu", "--out",
         str(tmp_path / name), "--json", *more, "--", sys.executable, str(SERVERS / "llama_server.py"), str(gguf),
         "--port", str(port), "--parallel", "1", "--metrics"],
        env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = P.gpusleuth_rows(tmp_path / name)
    return json.loads(res.stdout), [[(r["token_ns"][0] - r["start_ns"]) / 1e6 for r in rows if r["level"] == k]
                                    for k in range(4)]


def test_the_same_level_twice_reads_the_same_ttft_and_the_engines_cached_prompt_share(tmp_path, gguf, host_load):
    """Issue 32 item 2's must-show. Every level restarted the same list of prompts, so the second of two equal
    levels was answered from llama.cpp's prompt cache: TTFT p50 361 → 6.5 ms, its cached share 0.45 (measured on
    the old code, two levels of 4 s). Now every request's prompt is fresh: the same level run again reads the same
    TTFT within 25 % and the engine's own counters say it served next to nothing from its cache; with
    ``--shared-prefix`` the shared words are what it serves from cache (100 of the 250 words: ≈ 40 %), per level.

    The same level is run four times and the runs compared in turn (levels 1 and 3 against 2 and 4): on a shared
    2-core machine someone else's burst of load moved one 4-second level's TTFT by 26-30 % (p10 100 vs 126 ms, p50
    110 vs 178 ms, measured), where a cached prompt moves it 50-fold."""
    rep, ttft = _same_level(tmp_path, gguf, "fresh")
    assert all(len(t) >= 5 for t in ttft), [len(t) for t in ttft]
    odd, even = statistics.median(ttft[0] + ttft[2]), statistics.median(ttft[1] + ttft[3])
    assert min(statistics.median(t) for t in ttft) > 0.5 * odd  # no level answered from a cache
    em = rep["engine_metrics"]["levels"]
    assert all(lv["cached_prompt_share"] < 0.05 for lv in em), em

    shared, _ = _same_level(tmp_path, gguf, "shared", "--shared-prefix", "100")
    em = shared["engine_metrics"]["levels"]
    assert all(0.25 < lv["cached_prompt_share"] < 0.6 for lv in em), em
    # each answer's own count of prompt tokens from the cache (usage's cached_tokens), per level, against the
    # engine's /metrics counters over the same level (scraped a second apart: a level's edges blur the latter)
    mine = [lv["tokens"]["cached_share"] for lv in shared["serving"]["levels"]]
    assert all(m is not None and m == pytest.approx(lv["cached_prompt_share"], abs=0.1) for m, lv in zip(mine, em)), (
        mine, em)
    with host_load.quiet_or_skip("the same level's TTFT within 25 %"):  # CI at load 4-6: 125 vs 170 ms
        assert even == pytest.approx(odd, rel=0.25), (odd, even)


def test_gpusleuth_times_each_request_as_an_independent_proxy_does(tmp_path, gguf):
    import llm_proxy_clock as P

    engine_port, proxy_port = free_port(), free_port()
    log = tmp_path / "engine.log"
    proc = P.start_llama(gguf, engine_port, log, parallel=4)
    proxy = None
    try:
        body = json.dumps({"prompt": "hi", "max_tokens": 4, "stream": True}).encode()
        P.wait_engine(f"http://127.0.0.1:{engine_port}/v1/completions", proc, body, log)
        plog = tmp_path / "proxy.jsonl"
        proxy = P.start_proxy(proxy_port, engine_port, plog)
        P.gpusleuth_load(f"http://127.0.0.1:{proxy_port}/v1/completions", "2,4", 3.0, tmp_path / "run", 24)
        records = P.proxy_records(plog)
    finally:
        if proxy is not None:
            P.stop(proxy)
        P.stop(proc)
    rows = P.gpusleuth_rows(tmp_path / "run")
    for level, conc in ((0, 2), (1, 4)):
        pairs = P.joined([r for r in rows if r["level"] == level], records)
        assert len(pairs) >= 0.95 * sum(1 for r in rows if r["level"] == level) > 10, (conc, len(pairs))
        a = P.agreement(pairs)
        assert not P.disagreements(a), (conc, P.disagreements(a), a)
        # the same requests with 1 ms planted in gpusleuth's first-token stamps: the check must see it
        assert P.disagreements(P.agreement(P.planted(pairs, 1.0))), (conc, a)


def test_a_server_that_closes_after_each_answer_costs_gpusleuth_no_more_than_a_stdlib_client(tmp_path):
    """llama.cpp's server closes the connection after every streamed answer although its header says
    ``Keep-Alive``; ``tests/servers/closing_stream.py`` does the same without an engine. Through the proxy,
    gpusleuth's request leg (its start stamp → its request's bytes out, the reconnect included) must be
    shorter than the stdlib client's whole excess over the proxy's TTFT (its connect, send, wake-up and
    parse), measured interleaved in the same test so that both see the same host load. Before gpusleuth
    learnt to open a fresh connection per request against such a server, its leg was the write onto the
    closed connection, the close read back and an asyncio reconnect: 0.51–0.59 ms p50 against the stdlib's
    0.30–0.33 ms (afterwards 0.11 ms)."""
    import llm_proxy_clock as P

    port, proxy_port = free_port(), free_port()
    server = subprocess.Popen([sys.executable, str(SERVERS / "closing_stream.py"), str(port), "--tokens", "8",
                               "--gap-ms", "2"], stdout=subprocess.PIPE, text=True)
    proxy = None
    legs, stdlib_excess = [], []
    try:
        assert server.stdout is not None and server.stdout.readline().startswith("listening")
        plog = tmp_path / "proxy.jsonl"
        proxy = P.start_proxy(proxy_port, port, plog)
        url = f"http://127.0.0.1:{proxy_port}/v1/completions"
        body = tmp_path / "body.json"
        body.write_text(json.dumps({"prompt": "hi", "max_tokens": 8, "stream": True}))
        for i in range(2):
            skip = P.proxy_lines(plog)
            P.gpusleuth_load(url, "4", 2.0, tmp_path / f"run{i}", 8)
            pairs = P.joined(P.gpusleuth_rows(tmp_path / f"run{i}"), P.proxy_records(plog, skip))
            assert len(pairs) > 50
            a = P.agreement(pairs)
            assert a["per_connection"] == 1.0 and not P.disagreements(a), a  # it did close every connection
            legs.append(a["request_leg_p50"])
            s = P.stdlib_through(url, body, 4, 2.0, plog)
            assert s["requests"] > 50, s
            stdlib_excess.append(s["client_ttft_p50"] - s["proxy_ttft_p50"])
    finally:
        if proxy is not None:
            P.stop(proxy)
        P.stop(server)
    assert statistics.median(legs) < statistics.median(stdlib_excess), (legs, stdlib_excess)
