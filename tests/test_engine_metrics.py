"""LLM engines' own /metrics (issue 26, deliverable 6): the parser on real captures from vLLM's and SGLang's
documentation (tests/fixtures/engine_metrics/README.md), the scrape beside `gpusleuth load`, the per-level
analysis and the engine-capacity rule.

vLLM, SGLang and TGI need a GPU, so the end-to-end test here serves the recorded vLLM capture from a stdlib
stand-in at the boundary — the engine's numbers are the recorded ones, the load, scrape, storage, parse and
join are the product's. llama.cpp's own server runs on CPU: tests/test_llama_engine.py loads it live.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import REPO
from gpusleuth.serving.run.engine_samples import histogram_quantile
from gpusleuth.serving.sources.engine_metrics import parse_engine_metrics, read_engine_scrapes

FIX = REPO / "tests" / "fixtures" / "engine_metrics"
VLLM = (FIX / "vllm_v1_design_doc.metrics").read_text()
SGLANG = (FIX / "sglang_production_metrics_doc.metrics").read_text()


def test_vllm_capture():
    s = parse_engine_metrics(VLLM, 1)
    assert s.engine == "vllm" and s.values == {"running": 8.0, "generation_tokens": 27453.0}
    h = s.hists["ttft"]
    assert h.count == 140 and h.bounds[:4] == [0.001, 0.005, 0.01, 0.02]
    # the 70th of 140 TTFTs lies between the 13 under 20 ms and the 97 under 40 ms
    assert histogram_quantile(h.bounds, h.counts, 0.5) == pytest.approx(0.02 + 0.02 * (70 - 13) / (97 - 13))


def test_sglang_capture():
    s = parse_engine_metrics(SGLANG, 1)
    assert s.engine == "sglang"
    assert s.values == {"running": 162.0, "waiting": 2826.0, "kv_usage": 0.28, "prompt_tokens": 8128902.0,
                        "generation_tokens": 7557572.0, "prefix_hit_rate": 0.007507552643049313}
    tpot = s.hists["tpot"]
    rank = 0.5 * 7.400757e6
    assert histogram_quantile(tpot.bounds, tpot.counts, 0.5) == pytest.approx(
        0.075 + 0.025 * (rank - 433413) / (4.950195e6 - 433413))
    # more than half of its TTFTs are past the last finite bucket (30 s): the quantile is that bound
    assert histogram_quantile(s.hists["ttft"].bounds, s.hists["ttft"].counts, 0.5) == 30.0


def test_rank_labels_count_once_and_replicas_add_up():
    text = ("# TYPE sglang:num_running_reqs gauge\n"
            'sglang:num_running_reqs{model_name="m",tp_rank="0"} 3.0\n'
            'sglang:num_running_reqs{model_name="m",tp_rank="1"} 3.0\n'
            "# TYPE vllm:x gauge\n")
    assert parse_engine_metrics(text, 1).values["running"] == 3.0
    two = ("# TYPE vllm:num_requests_waiting gauge\n"
           'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0\n'
           'vllm:num_requests_waiting{engine="1",model_name="m"} 5.0\n'
           "# TYPE vllm:kv_cache_usage_perc gauge\n"
           'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
           'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.9\n')
    s = parse_engine_metrics(two, 1)
    assert s.values["waiting"] == 7.0 and s.values["kv_usage"] == pytest.approx(0.7)


def test_tgi_and_llamacpp_names():
    """Text in the form their documentation gives (TGI docs/source/reference/metrics.md; llama.cpp
    tools/server/README.md "GET /metrics"): the names map onto the same signals."""
    tgi = parse_engine_metrics("# TYPE tgi_queue_size gauge\ntgi_queue_size 4\n"
                               "# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 12\n"
                               "# TYPE tgi_request_queue_duration histogram\n"
                               'tgi_request_queue_duration_bucket{le="0.1"} 3\n'
                               'tgi_request_queue_duration_bucket{le="+Inf"} 4\n'
                               "tgi_request_queue_duration_sum 0.5\ntgi_request_queue_duration_count 4\n", 1)
    assert tgi.engine == "tgi" and tgi.values == {"running": 12.0, "waiting": 4.0} and tgi.hists["queue"].count == 4
    ll = parse_engine_metrics("# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 120\n"
                              "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 340\n"
                              "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 2\n"
                              "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 5\n", 1)
    assert ll.engine == "llamacpp"
    assert ll.values == {"running": 2.0, "waiting": 5.0, "prompt_tokens": 120.0, "generation_tokens": 340.0}
    assert parse_engine_metrics("# TYPE http_requests_total counter\nhttp_requests_total 3\n", 1) is None


def test_llamacpp_live_capture():
    """What llama.cpp's live server says (two slots running, two requests deferred): the names its README
    does not list are read too, and the KV usage it no longer exposes is not invented."""
    s = parse_engine_metrics((FIX / "llamacpp_live.metrics").read_text(), 1)
    assert s.engine == "llamacpp" and s.hists == {}
    assert s.values == {"running": 2.0, "waiting": 2.0, "busy_slots_per_decode": 1.8717, "prompt_tokens": 51.0,
                        "generation_tokens": 32.0, "prompt_tokens_cached": 45.0, "decode_steps": 265.0,
                        "prefill_seconds": 0.019285, "decode_seconds": 0.011906}


def test_llamacpp_mean_batch_between_two_scrapes():
    """busy slots per decode is a mean since start: two scrapes give the mean over the steps between them."""
    from types import SimpleNamespace

    from gpusleuth.serving.analysis.engine import analyze_engine
    from gpusleuth.serving.run.engine_samples import EngineSample

    def at(t, steps, mean, tokens, secs):
        return EngineSample(t_ns=t, engine="llamacpp", values={"decode_steps": steps, "busy_slots_per_decode": mean,
                                                               "generation_tokens": tokens, "decode_seconds": secs})

    # 100 steps at 1 busy slot, then 300 steps at 2: the mean since start reads 1.75 after them
    run = SimpleNamespace(engine=[at(0, 100, 1.0, 100, 0.1), at(2_000_000_000, 400, 1.75, 700, 0.7)])
    load = SimpleNamespace(levels=[SimpleNamespace(level=0, concurrency=2, rate=0.0, start_ns=1, end_ns=2_000_000_000)])
    lv = analyze_engine(run, load).levels[0]
    assert lv.batch_mean == pytest.approx(2.0) and lv.decode_ms_per_token == pytest.approx(1.0)


def test_the_engines_cached_prompt_share_per_level():
    """Issue 32: what share of a level's prompt tokens the engine answered from its prefix cache — vLLM V1's
    counters of tokens looked up and found, llama.cpp's computed and cached prompt tokens, SGLang's hit-rate gauge
    (its mean over the level) — and none from an engine that says nothing about a cache."""
    from types import SimpleNamespace

    from gpusleuth.serving.analysis.engine import analyze_engine

    def text(hits: int, queries: int) -> str:
        return ("# TYPE vllm:prefix_cache_queries counter\n"
                f'vllm:prefix_cache_queries_total{{engine="0",model_name="m"}} {queries}\n'
                "# TYPE vllm:prefix_cache_hits counter\n"
                f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {hits}\n'
                'vllm:num_requests_running{engine="0",model_name="m"} 1\n')

    load = SimpleNamespace(levels=[SimpleNamespace(level=0, concurrency=1, rate=0.0, start_ns=1, end_ns=10**9),
                                   SimpleNamespace(level=1, concurrency=1, rate=0.0, start_ns=10**9 + 1,
                                                   end_ns=2 * 10**9)])
    vllm = [parse_engine_metrics(text(h, q), t) for t, h, q in ((0, 0, 0), (10**9, 64, 1024), (2 * 10**9, 1000, 2048))]
    one, two = analyze_engine(SimpleNamespace(engine=vllm), load).levels
    assert one.cached_prompt_share == pytest.approx(64 / 1024) and two.cached_prompt_share == pytest.approx(936 / 1024)

    ll = [parse_engine_metrics("llamacpp:prompt_tokens_total %d\nllamacpp:prompt_tokens_cached_total %d\n" % v, t)
          for t, v in ((0, (0, 0)), (10**9, (300, 100)), (2 * 10**9, (300, 100)))]
    one, two = analyze_engine(SimpleNamespace(engine=ll), load).levels
    assert one.cached_prompt_share == pytest.approx(0.25) and two.cached_prompt_share is None  # no prompt in it

    sg = [parse_engine_metrics(f'sglang:cache_hit_rate{{model_name="m"}} {r}\nsglang:num_running_reqs 1\n', t)
          for t, r in ((5 * 10**8, 0.2), (9 * 10**8, 0.4), (15 * 10**8, 0.9))]
    one, two = analyze_engine(SimpleNamespace(engine=sg), load).levels
    assert one.cached_prompt_share == pytest.approx(0.3) and two.cached_prompt_share == pytest.approx(0.9)

    tgi = [parse_engine_metrics("tgi_queue_size 1\n", t) for t in (0, 10**9)]
    assert analyze_engine(SimpleNamespace(engine=tgi), load).levels[0].cached_prompt_share is None


def test_a_scrape_after_the_next_level_began_is_not_the_previous_levels():
    """Levels are 0.2 s apart and a scrape up to 0.3 s after a level's end still counts for it (requests finishing
    last): one taken after the next level had begun held that level's first answers (on the old prompts' cached
    requests, level 1 read a cached share of 0.50 that was level 2's). It belongs to the next level only."""
    from types import SimpleNamespace

    from gpusleuth.serving.analysis.engine import analyze_engine

    ms = 1_000_000
    text = "llamacpp:prompt_tokens_total %d\nllamacpp:prompt_tokens_cached_total %d\n"
    # level 0 computed 300 prompt tokens; level 1 (from +1200 ms) answered 300 from cache in its first 50 ms
    at = [(0, (0, 0)), (1000 * ms, (300, 0)), (1250 * ms, (300, 300)), (2400 * ms, (600, 300))]
    run = SimpleNamespace(engine=[parse_engine_metrics(text % v, t) for t, v in at])
    load = SimpleNamespace(levels=[SimpleNamespace(level=0, concurrency=1, rate=0.0, start_ns=1, end_ns=1000 * ms),
                                   SimpleNamespace(level=1, concurrency=1, rate=0.0, start_ns=1200 * ms,
                                                   end_ns=2200 * ms)])
    one, two = analyze_engine(run, load).levels
    assert one.cached_prompt_share == 0.0 and two.cached_prompt_share == pytest.approx(0.5)


def test_damaged_scrapes_are_skipped_and_counted(tmp_path):
    lines = [json.dumps({"t_ns": 2, "text": VLLM}), "not json", json.dumps({"t_ns": 3, "text": "vllm:x{{{ 1\n"}),
             json.dumps({"t_ns": 1, "text": SGLANG})]
    (tmp_path / "engine_metrics.jsonl").write_text("\n".join(lines) + "\n")
    samples, loss = read_engine_scrapes(tmp_path)
    assert [s.t_ns for s in samples] == [1, 2]
    assert loss == "engine_metrics.jsonl: 2 unreadable scrape(s) skipped"


class _Engine(http.server.BaseHTTPRequestHandler):
    """Answers the load with a few bytes and /metrics with a recorded engine capture (``METRICS``)."""

    protocol_version = "HTTP/1.1"
    METRICS: str | None = VLLM

    def log_message(self, *args):
        pass

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/metrics" and self.METRICS is not None:
            self._send(200, self.METRICS.encode())
        else:
            self._send(200 if self.path == "/" else 404, b"ok")

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(200, b"ok")


def _load(tmp_path: Path, handler) -> dict:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        from test_serving import _env

        url = f"http://127.0.0.1:{server.server_address[1]}/"
        res = subprocess.run([sys.executable, "-m", "gpusleuth", "load", url, "--concurrency", "1,2", "--duration",
                              "1.5", "--method", "POST", "--out", str(tmp_path / "run")], env=_env(),
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        rep = subprocess.run([sys.executable, "-m", "gpusleuth", "report", str(tmp_path / "run"), "--json"],
                             env=_env(), capture_output=True, text=True, timeout=120)
        assert rep.returncode == 0, rep.stderr[-2000:]
        return json.loads(rep.stdout)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.process
@pytest.mark.process
def test_gpusleuth_load_reads_the_engines_metrics_per_level(tmp_path):
    rep = _load(tmp_path, _Engine)
    em = rep["engine_metrics"]
    assert em["engine"] == "vllm" and em["scrapes"] >= 2
    assert [lv["concurrency"] for lv in em["levels"]] == [1, 2]
    for lv in em["levels"]:
        if lv["scrapes"]:
            assert lv["running_mean"] == 8.0 and lv["running_max"] == 8.0  # the capture's own gauge
        assert lv["p50_ms"] == {}  # a recorded capture does not grow: no request finished in the level
    text = (tmp_path / "run" / "engine_metrics.jsonl").read_text().splitlines()[0]
    kept = json.loads(text)["text"]
    assert "vllm:request_success_total" not in kept  # only the lines gpusleuth reads are kept


@pytest.mark.process
@pytest.mark.process
def test_a_server_without_engine_metrics_gets_nothing(tmp_path):
    class Plain(_Engine):
        METRICS = None

    rep = _load(tmp_path, Plain)
    assert rep["engine_metrics"] is None and not (tmp_path / "run" / "engine_metrics.jsonl").exists()


def _facts(levels):
    from types import SimpleNamespace

    from gpusleuth.serving.analysis.engine import EngineAnalysis, EngineLevel

    return SimpleNamespace(engine=EngineAnalysis(engine="vllm", scrapes=20, levels=[
        EngineLevel(level=i, concurrency=c, rate=0.0, scrapes=5, **kw) for i, (c, kw) in enumerate(levels)]))


def test_engine_capacity_rule_earns_its_severity():
    from gpusleuth.serving.rules.batching import engine_capacity as rule

    calm = dict(running_mean=4.0, running_max=4.0, waiting_mean=0.0, waiting_max=0.0, kv_usage_mean=0.3,
                kv_usage_max=0.35, preemptions=0.0)
    assert rule(_facts([(4, calm)])) == []
    full = dict(calm, kv_usage_mean=0.93, kv_usage_max=0.99, preemptions=12.0, waiting_mean=3.0, waiting_max=7.0)
    (f,) = rule(_facts([(4, calm), (64, full)]))
    assert f.severity == "high" and "concurrency 64" in f.title and "12 preemptions" in f.title
    assert "--max-num-seqs" in f.fix and "--gpu-memory-utilization" in f.fix
    capped = dict(calm, waiting_mean=6.0, waiting_max=9.0)
    (g,) = rule(_facts([(64, capped)]))
    assert g.severity == "moderate" and "wait inside the engine" in g.title
    assert "Raise the engine's running-sequence cap" in g.fix
    # compute-bound (issue 32 item 9): llama.cpp's decode per token grew 0.9 -> 6.5 ms from concurrency 1 to 4
    # while its tokens/s stayed flat: replicas, not a higher cap
    light = dict(calm, running_mean=1.0, decode_ms_per_token=0.9, generation_tokens_per_s=110.0)
    shared = dict(capped, running_mean=4.0, decode_ms_per_token=6.5, generation_tokens_per_s=125.0)
    (h,) = rule(_facts([(1, light), (4, shared)]))
    assert "compute-bound" in h.summary and h.fix.startswith("Add replicas")
    # the same wait where more sequences did raise the tokens/s: the cap held them back
    scaling = dict(shared, decode_ms_per_token=1.2, generation_tokens_per_s=400.0)
    (k,) = rule(_facts([(1, light), (4, scaling)]))
    assert "Raise the engine's running-sequence cap" in k.fix
