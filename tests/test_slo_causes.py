"""Why requests missed their SLO, the causes that need more than one part of a request (issue 26 item 5), on
real servers that time themselves, each planted and beside its fixed twin:

* prefill delayed by others' decode — ``tests/servers/openai_engine.py``, a continuous-batching engine that
  runs its sequences' decode first and admits new prompts every 16 decode steps; its twin the same engine
  with chunked prefill (a new prompt joins the next step). The finding's wait behind others' decode is the
  engine's own account of the same requests.
* too few replicas — the same engine on a compute-bound model (a bigger batch buys nothing) with 4 slots,
  loaded past them; quiet where something inside the server holds the requests instead: a batcher's wait
  window (``batching_infer.py``), preprocessing in the request path (``http_infer.py tokenize``).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import free_port
from test_serving import BODY, SERVERS, _env, _load_and_report


def _engine(tmp_path: Path, concurrency: str, slo: str, *server_args: str):
    """``gpusleuth load …/v1/completions --slo … -- python openai_engine.py …``: (report JSON, the engine's
    request lines by id, its step lines, the load's rows)."""
    import pyarrow.parquet as pq

    port = free_port()
    out, truth = tmp_path / "run", tmp_path / "truth.jsonl"
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}/v1/completions",
                          "--concurrency", concurrency, "--duration", "4", "--input-tokens", "8:2", "--output-tokens",
                          "32:12", "--slo", slo, "--out", str(out), "--", sys.executable,
                          str(SERVERS / "openai_engine.py"), str(port), str(truth), *server_args],
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    rep = subprocess.run([sys.executable, "-m", "gpusleuth", "report", str(out), "--json"], env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr[-3000:]
    lines = [json.loads(line) for line in truth.read_text().splitlines() if line.strip()]
    own = {r["id"]: r for r in lines if "id" in r}
    steps = np.asarray([r["step"] for r in lines if "step" in r], dtype=np.float64)
    load = pq.read_table(out / "load.parquet").to_pydict()
    return json.loads(rep.stdout), own, steps, load


def _finding(rep: dict, cause: str) -> dict | None:
    return next((f for f in rep["findings"] if f["cause"] == cause and f["severity"] != "none"), None)


@pytest.mark.process
def test_prefill_waiting_behind_others_decode_is_named_and_matches_the_engines_clock(tmp_path):
    """Planted: decode first, new prompts admitted every 16 decode steps. At concurrency 6 the requests that
    missed a 25 ms TTFT budget waited behind the others' decode steps; the finding says how long, and the
    engine's own account of the same requests (the decode-only steps it ran while each waited) agrees."""
    rep, own, steps, load = _engine(tmp_path, "1,6", "ttft=25ms")
    f = _finding(rep, "serving.prefill_behind_decode")
    assert f is not None, [(x["cause"], x["title"]) for x in rep["findings"]]
    assert "--enable-chunked-prefill" in f["fix"] and "--chunked-prefill-size" in f["fix"] \
        and "--max-waiting-tokens" in f["fix"] and "--cb-max-batch-tokens" in f["fix"]
    m = next(x for x in rep["request_stages"]["misses"] if x["concurrency"] == 6)
    assert m["behind_decode_share"] >= 0.2 and m["ttft_grew"] >= 5
    # the same requests, chosen as the analysis does: missed at concurrency 6, TTFT past concurrency 1's p90
    level, ids = np.asarray(load["level"]), np.asarray([str(i) for i in load["request_id"]])
    ttft = (np.asarray(load["first_token_ns"]) - np.asarray(load["start_ns"])) / 1e6
    ok = np.asarray(load["error"]) == ""
    grew = ok & (level == m["level"]) & (ttft > 25) & (ttft > np.percentile(ttft[ok & (level == 0)], 90))
    assert grew.sum() == m["ttft_grew"]
    # a slot was free: the step ran fewer sequences than the most the engine ran together (sizes at least
    # 1 % of its steps had), the definition the analysis applies to the forwards it joined
    seqs, counts = np.unique(steps[:, 5], return_counts=True)
    full = seqs[counts >= max(1, 0.01 * len(steps))].max()
    behind = [[b for b in own[i]["behind"] if b[1] < full] for i in ids[grew]]
    theirs = np.asarray([sum(b[0] for b in x) for x in behind]) * 1e3
    assert abs(m["behind_decode_ms"] / theirs.sum() - 1) < 0.15, (m["behind_decode_ms"], theirs.sum())
    assert abs(m["behind_steps_p50"] - np.median([len(x) for x in behind])) <= 2
    # severity by the share of the missed requests' TTFT it explains, as the engine's clock puts it
    share = theirs.sum() / ttft[grew].sum()
    assert abs(m["behind_decode_share"] - share) < 0.1, (m["behind_decode_share"], share)
    assert f["severity"] == ("high" if m["behind_decode_share"] >= 0.4 and m["ttft_grew"] >= min(20, m["missed"])
                             else "moderate")


@pytest.mark.process
def test_chunked_prefill_twin_is_not_blamed_on_decode(tmp_path):
    """The same engine with chunked prefill: a new prompt is in the next step, so no request waits behind the
    others' decode — by the engine's clock and by the finding, which stays quiet whatever else missed."""
    rep, own, _, _ = _engine(tmp_path, "1,6", "ttft=25ms", "--chunked-prefill", "32")
    # at most a step the engine had already built when the request came (both clocks count it)
    assert max(len(r["behind"]) for r in own.values()) <= 1
    assert sum(b[0] for r in own.values() for b in r["behind"]) < 0.05 * sum(r["ttft_s"] for r in own.values())
    assert _finding(rep, "serving.prefill_behind_decode") is None
    assert all((m["behind_decode_share"] or 0.0) < 0.05 for m in rep["request_stages"]["misses"])


@pytest.mark.process
def test_a_full_replica_is_named_with_the_replicas_it_needs(tmp_path):
    """Planted: a compute-bound engine (a step costs its rows one by one) with 4 slots, at concurrency 1, 4,
    12: throughput stops growing, requests queue for a slot, the engine is never idle. The finding gives one
    replica's capacity within the SLO and the replicas the heaviest level needs; the wait it quotes is the
    engine's own (enqueued → its first step), and the throughput the engine's own count of answers."""
    rep, own, steps, load = _engine(tmp_path, "1,4,12", "ttft=150ms,itl=10ms", "--chunked-prefill", "32",
                                    "--max-num-seqs", "4", "--compute-bound", "--width", "512")
    f = _finding(rep, "serving.too_few_replicas")
    assert f is not None, [(x["cause"], x["title"]) for x in rep["findings"]]
    cap = rep["request_stages"]["capacity"]
    assert cap["saturated"] and cap["offered_concurrency"] == 12
    per = next(c for c in cap["levels"] if c["level"] == cap["per_replica_level"])
    assert per["meets"] and cap["replicas"] == math.ceil(12 / per["concurrency"]) >= 2
    assert f"{cap['replicas']} needed" in f["title"] and f"= {cap['replicas']} replicas" in f["summary"]
    assert _finding(rep, "serving.prefill_behind_decode") is None  # every step full: a slot, not the schedule
    # the same wait is not named twice: a batch wait queued behind earlier batches is this finding's, with N
    assert _finding(rep, "serving.batch_wait") is None, [(x["cause"], x["title"]) for x in rep["findings"]]
    b = rep["request_stages"]["batching"]
    if b is not None and b["queued_share"] is not None:
        ev = {e["name"]: e["value"] for e in f["evidence"]}
        assert ev["waiting for a batch, queued behind earlier batches"] == pytest.approx(b["queued_share"] * 100,
                                                                                         abs=0.1)
    heavy = cap["levels"][-1]
    level, ids = np.asarray(load["level"]), np.asarray([str(i) for i in load["request_id"]])
    ok = np.asarray(load["error"]) == ""
    mine = ids[ok & (level == heavy["level"])]
    waited = np.median([own[i]["first_step_s"] for i in mine if i in own]) * 1e3
    assert abs(heavy["waiting_p50_ms"] / waited - 1) < 0.2, (heavy["waiting_p50_ms"], waited)
    # answers per second: the level's answered requests over its span, as the engine counted them
    lv = next(x for x in rep["serving"]["levels"] if x["level"] == heavy["level"])
    served = sum(1 for i in mine if i in own)
    assert served == lv["ok"]
    # the engine was stepping nearly all the heaviest level: its steps' own clock, gaps under a step's length
    s = steps[(steps[:, 0] >= lv["start_ns"]) & (steps[:, 0] < lv["end_ns"])]
    assert len(s) and heavy["model_busy"] >= 0.8


@pytest.mark.process
def test_a_batch_window_is_not_called_too_few_replicas(tmp_path):
    """A batcher that holds work 20 ms to collect more (max batch 32 never filled): requests wait, but for
    the window — the model idles meanwhile — so the wait is the batch finding's, not a replica count."""
    pytest.importorskip("fastapi")
    _, rep, _ = _load_and_report(tmp_path, "asgi", "batching_infer.py", "2,16", BODY[:2000], "32", "20", "256")
    assert _finding(rep, "serving.batch_wait") is not None
    assert _finding(rep, "serving.too_few_replicas") is None
    cap = rep["request_stages"]["capacity"]
    assert not cap["saturated"]


@pytest.mark.process
def test_preprocessing_in_the_request_path_is_not_called_too_few_replicas(tmp_path):
    """A GIL-bound tokenizer in the handler: throughput flat, requests wait — for the Python before the model,
    which a faster tokenizer fixes inside the server. Alone, a request is mostly tokenizing; at concurrency 16
    the threads' wait for the interpreter lands inside the model's calls too (its span reads 95-97 % busy and
    the share before it 31 % on one host, under 30 % on CI's 2 cores), so the guard reads the lightest level."""
    _, rep, _ = _load_and_report(tmp_path, "tokenize")
    assert _finding(rep, "serving.too_few_replicas") is None
    cap = rep["request_stages"]["capacity"]
    assert not cap["saturated"] and cap["held_by"] == "preprocessing", cap
    alone = cap["levels"][0]
    assert alone["concurrency"] == 1 and alone["pre_share"] >= 0.5, alone


def test_open_loop_replicas_are_the_offered_rate_over_one_replicas_goodput():
    """Open loop: one replica's capacity is the goodput of the heaviest rate that met the SLO, and the
    replicas the offered rate over it; a rate no level met leaves the count unmeasured, said in a note."""
    from types import SimpleNamespace as NS

    from gpusleuth.serving.analysis.capacity import assess_capacity

    t0 = 10**18

    def lv(i, rate, rps, good, meets):
        return NS(level=i, concurrency=0, rate=rate, ok=100, rps=rps, p50_ms=50.0, p95_ms=90.0,
                  start_ns=t0 + i * 10**10, end_ns=t0 + (i + 1) * 10**10, tokens=None,
                  slo=NS(meets=meets, goodput_rps=good, goodput_tokens_per_s=good * 100))

    req = NS(levels=[NS(level=i, outside_p50_ms=0.0, shares={"pre": 0.0}, requests=10, batch_collect_share=None,
                        batch_size_p50=None) for i in range(3)], _rows={}, _batches={})
    load = NS(slo={"ttft_ms": 100.0}, p95_budget_ms=None, knee_level=None,
              levels=[lv(0, 2.0, 2.0, 2.0, True), lv(1, 6.0, 5.9, 5.5, True), lv(2, 20.0, 7.0, 1.0, False)])
    cap = assess_capacity(load, req)
    assert (cap.per_replica_level, cap.offered_rps, cap.replicas) == (1, 20.0, math.ceil(20.0 / 5.5))
    assert cap.next_level == 2  # the capacity lies between 6/s (met) and 20/s (missed): the count is a bound
    assert cap.per_replica_tokens_per_s == 550.0 and not cap.saturated  # no forward seen: the model's time unknown
    load.levels[1].slo.meets = load.levels[0].slo.meets = False
    none = assess_capacity(load, req)
    assert none.replicas is None and none.notes == ["no level met the SLO: one replica's capacity within it is not measured"]


@pytest.mark.unit
def test_preprocessing_holds_the_requests_by_the_lightest_levels_make_up():
    """The guard reads the share of service time before the model where a request runs alone as well as at
    the heaviest level: CI's tokenizing server read 89 % alone and under 30 % at concurrency 16 (the GIL's
    wait inflating the model's span), and saturation must not be called on the heavy level's share alone."""
    from types import SimpleNamespace as NS

    from gpusleuth.serving.analysis.capacity import _saturation
    from gpusleuth.serving.analysis.request_model import CapacityLevel

    def lv(conc, rps, wait, lat, busy, pre):
        return CapacityLevel(level=conc, concurrency=conc, rate=0.0, rps=rps, goodput_rps=None, tokens_per_s=None,
                             goodput_tokens_per_s=None, meets=None, model_busy=busy, waiting_p50_ms=wait,
                             latency_p50_ms=lat, pre_share=pre, collect_share=None, batch_p50=None)

    def judged(base_pre):
        entry = NS(reference_level=None, waiting_growth_ms=None, held_by=None, saturated=False)
        _saturation(entry, [lv(1, 150.0, 0.1, 6.0, 0.07, base_pre), lv(16, 146.0, 30.0, 78.0, 0.97, 0.25)], True)
        return entry

    held = judged(0.89)
    assert held.held_by == "preprocessing" and not held.saturated
    engine = judged(0.05)  # a request alone is mostly the model's: the same heavy level is one full replica
    assert engine.held_by is None and engine.saturated
