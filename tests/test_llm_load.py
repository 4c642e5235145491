"""``gpusleuth load`` against OpenAI-compatible streaming servers (issue 26), checked against their own clocks.

The streaming server (``tests/servers/openai_stream.py``: a tiny causal transformer on CPU behind a stdlib
``ThreadingHTTPServer``) writes, per request, its own TTFT and every gap between its token writes to a JSONL
file, keyed by the ``X-Request-Id`` header gpusleuth sends. The test joins the two per request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import free_port, gpusleuth
from test_serving import _wait_ready
from gpusleuth.serving.analysis.load import analyze_load
from gpusleuth.serving.analysis.tokens import parse_slo
from gpusleuth.serving.recorder.arrivals import arrival_offsets
from gpusleuth.serving.recorder.load_plan import LoadPlan
from gpusleuth.serving.recorder.loadgen import run_plan
from gpusleuth.serving.recorder.prompts import Lengths, synthetic
from gpusleuth.run.model import Run, Table

SERVERS = Path(__file__).parent / "servers"


@pytest.fixture(scope="module")
def stream_server(tmp_path_factory):
    truth = tmp_path_factory.mktemp("llm") / "truth.jsonl"
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVERS / "openai_stream.py"), str(port), str(truth),
                             "--layers", "4", "--width", "192"], cwd=SERVERS,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_ready(port, proc)
        yield f"http://127.0.0.1:{port}", truth
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _truth(path: Path, ids=()) -> dict[str, dict]:
    """The server's records by request id; it writes each just after the request's last byte, so wait (a
    few seconds at most) until every id asked for is there."""
    deadline = time.monotonic() + 10
    while True:
        rows = {}
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue  # the line the server is writing now
            if r["id"]:
                rows[r["id"]] = r
        if all(str(i) in rows for i in ids) or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def _llm_plan(url: str, levels, **kw) -> LoadPlan:
    kw.setdefault("prompts", synthetic(64, Lengths(300, 20), Lengths(16), seed=1))
    return LoadPlan(url=url + "/v1/chat/completions", mode=kw.pop("mode", "closed"), levels=levels, method="POST",
                    headers=[("Content-Type", "application/json")], api="chat", timeout_s=30, **kw)


def _analyze(plan: LoadPlan, result):
    return analyze_load(Run(meta={"load": plan.to_meta()}, load=Table(result.columns)))


@pytest.mark.process
def test_ttft_and_inter_token_p50_match_the_servers_own_clock(stream_server, host_load):
    """Concurrency 1 to 8: per level, the client's TTFT and inter-token gaps within 10 % of the server's clock
    request by request (the median of each request's ratio, of each gap's difference), the level's p50s the
    medians of those very requests, and every request's tokens and usage accounted.

    The server's clock starts at the kernel's arrival of the request's first bytes, so its queue is in both. The
    p50 of one clock's distribution against the other's is not asserted: under a busy suite (load 1.2 per core)
    concurrency 8 read 196.7 vs 175.4 ms while the requests' own ratios held — the client's wake-ups on a loaded
    host land in its times, and pairing the requests is what separates them from a wrong measurement."""
    url, truth_file = stream_server
    plan = _llm_plan(url, [1, 2, 4, 8], duration_s=2.0, pause_s=0.3)
    result = run_plan(plan)
    c = result.columns
    ids = c["request_id"]
    assert len(set(ids)) == len(ids) and ids.min() >= 1 << 20  # unique, from a random base: not 0, 1, 2 … per run
    truth = _truth(truth_file, [str(i) for i in ids[c["error"] == ""]])
    a = _analyze(plan, result)
    assert a.api == "chat" and [lv.concurrency for lv in a.levels] == [1, 2, 4, 8]
    slow: list[str] = []  # levels whose p50s are more than 10 % apart: said when the requests are, not asserted
    apart: list[str] = []  # levels whose requests, each against its own server record, are more than 10 % apart
    for lv in a.levels:
        m = (c["level"] == lv.level) & (c["error"] == "")
        assert lv.ok == lv.requests >= 2, (lv.concurrency, lv.errors_by)
        rows = [(i, truth[str(c["request_id"][i])]) for i in np.flatnonzero(m)]
        assert len(rows) == lv.ok  # every answered request is in the server's records, joined by X-Request-Id
        server_ttft = np.median([t["ttft_s"] * 1e3 for _, t in rows])
        server_itl = np.median(np.concatenate([t["gaps_s"] for _, t in rows])) * 1e3
        # request by request: the client's TTFT over the server's, and each gap over the same gap's
        ttft_ratio = np.median([(c["first_token_ns"][i] - c["start_ns"][i]) / 1e9 / t["ttft_s"] for i, t in rows])
        gap_diff = np.concatenate([np.diff(c["token_ns"][i]) / 1e9 - np.asarray(t["gaps_s"]) for i, t in rows])
        if not (ttft_ratio == pytest.approx(1.0, abs=0.10) and abs(np.median(gap_diff)) * 1e3 < 0.10 * server_itl):
            apart.append(f"concurrency {lv.concurrency}: client/server TTFT {ttft_ratio:.2f}, median gap "
                         f"difference {np.median(gap_diff) * 1e3:+.2f} ms of a {server_itl:.2f} ms gap")
        # the level's p50s: the medians of its requests' client times, computed here from the raw columns
        client_ttft = [(c["first_token_ns"][i] - c["start_ns"][i]) / 1e6 for i, _ in rows]
        client_gaps = np.concatenate([np.diff(c["token_ns"][i]) / 1e6 for i, _ in rows])
        assert lv.tokens.ttft_ms.p50 == pytest.approx(float(np.median(client_ttft)), rel=1e-9)
        assert lv.tokens.itl_ms.p50 == pytest.approx(float(np.median(client_gaps)), rel=1e-9)
        if not (lv.tokens.ttft_ms.p50 == pytest.approx(server_ttft, rel=0.10)
                and lv.tokens.itl_ms.p50 == pytest.approx(server_itl, rel=0.10)):
            slow.append(f"{lv.concurrency} (TTFT {lv.tokens.ttft_ms.p50:.2f} vs {server_ttft:.2f} ms, inter-token "
                        f"{lv.tokens.itl_ms.p50:.2f} vs {server_itl:.2f} ms)")
        # tokens: usage from the server's last event; one token event per token
        assert all(c["output_tokens"][i] == t["completion_tokens"] == 16 for i, t in rows)
        assert all(c["input_tokens"][i] == t["prompt_tokens"] for i, t in rows)
        assert all(len(c["token_ns"][i]) == 16 for i, _ in rows) and lv.tokens.tokens_from == "usage"
        assert lv.tokens.output_tokens_per_s == pytest.approx(16 * lv.ok / lv.duration_s, rel=1e-6)
        assert lv.tokens.itl_ms.n == 15 * lv.ok
    # the two clocks request by request: the client's wake-up delays on an overloaded host land in its times (not
    # the server's), so that is measured and said rather than passed off as agreement
    if apart:
        said = "; ".join(apart + ([f"the p50s more than 10 % apart at concurrency {', '.join(slow)}"] if slow else []))
        host_load.skip_if_crowded(f"the client's clock more than 10 % off the server's ({said})")
        pytest.fail(f"the client's clock more than 10 % off the server's: {said}")


@pytest.mark.process
def test_slo_goodput_attainment_and_the_highest_level(stream_server):
    """The SLO's attainment per level is recomputed here from the rows, and the highest level meeting it."""
    url, _ = stream_server
    plan = _llm_plan(url, [1, 8], duration_s=1.5, slo=parse_slo("ttft=1s,itl=40ms,attainment=80%"))
    result = run_plan(plan)
    a = _analyze(plan, result)
    c = result.columns
    for lv in a.levels:
        m = (c["level"] == lv.level) & (c["error"] == "")
        ttft = (c["first_token_ns"][m] - c["start_ns"][m]) / 1e6
        tpot = (c["end_ns"][m] - c["first_token_ns"][m]) / (c["output_tokens"][m] - 1) / 1e6
        met = int(((ttft <= 1000) & (tpot <= 40)).sum())
        assert lv.slo.met == met and lv.slo.attainment == pytest.approx(met / lv.requests)
        assert lv.slo.goodput_rps == pytest.approx(met / lv.duration_s)
        assert lv.slo.goodput_tokens_per_s == pytest.approx(16 * met / lv.duration_s)
        assert lv.slo.meets == (met / lv.requests >= 0.8)
    assert a.slo == {"ttft_ms": 1000.0, "itl_ms": 40.0, "attainment": 0.8}
    meeting = [lv for lv in a.levels if lv.slo.meets]
    if meeting:
        assert a.levels[a.slo_best] is meeting[-1] and "highest level meeting the SLO" in a.slo_reason
    else:
        assert a.slo_best is None and "no level meets the SLO" in a.slo_reason


@pytest.mark.process
def test_cli_streams_exports_and_renders(stream_server, tmp_path):
    url, truth_file = stream_server
    export, page, out = tmp_path / "req.jsonl", tmp_path / "llm.html", tmp_path / "run"
    res = gpusleuth("load", url + "/v1/completions", "--rate", "4,8", "--arrivals", "poisson", "--duration", "1.5",
                    "--input-tokens", "64:8", "--output-tokens", "8", "--slo", "ttft=500ms,itl=100ms",
                    "--export-requests", export, "--html", page, "--out", out, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "TTFT" in res.stdout and "goodput" in res.stdout
    lines = [json.loads(x) for x in export.read_text().splitlines()]
    answered = [r for r in lines if r["error"] == ""]
    truth = _truth(truth_file, [str(r["request_id"]) for r in answered])
    assert len(lines) >= 8 and answered
    for r in answered:
        t = truth[str(r["request_id"])]
        assert r["output_tokens"] == 8 == len(r["itl_ms"]) + 1 and r["input_tokens"] == t["prompt_tokens"]
        assert r["ttft_ms"] <= r["e2e_ms"] and t["path"] == "/v1/completions"
    html = page.read_text()
    assert "Time to first token" in html and "Inter-token latency" in html and "Goodput" in html
    rep = json.loads(gpusleuth("report", out, "--json").stdout)["serving"]
    assert rep["api"] == "completions" and rep["arrivals"] == "poisson" and rep["levels"][0]["tokens"]["ttft_ms"]


def test_poisson_and_gamma_arrivals_have_the_asked_spread():
    """The schedule itself: CV of the gaps ≈ 1 (Poisson), ≈ 2 (gamma cv=2), 0 (constant), mean 1/rate."""
    rng = np.random.default_rng(3)
    for kind, cv, want in (("poisson", 1.0, 1.0), ("gamma", 2.0, 2.0), ("gamma", 0.5, 0.5)):
        gaps = np.diff(arrival_offsets(100.0, 100.0, kind, cv, rng))
        assert gaps.std() / gaps.mean() == pytest.approx(want, rel=0.1), kind
        assert gaps.mean() == pytest.approx(0.01, rel=0.1)
    assert np.diff(arrival_offsets(100.0, 1.0, "constant", 1.0, rng)).std() < 1e-12


@pytest.mark.process
def test_poisson_cv_measured_from_the_send_times(tmp_path):
    """Live: open loop at 100/s Poisson against a server that answers at once; the CV of the gaps between
    the actual sends (scheduled start + the generator's lag), as the analysis reports it, is ≈ 1. The
    schedule is seeded, so its own CV is known; the host's jitter in sending may move it a little."""
    from test_load import _Server, _Handler

    srv = _Server(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/"
        plan = LoadPlan(url=url, mode="open", levels=[100], duration_s=3.0, arrivals="poisson", seed=7)
        a = _analyze(plan, run_plan(plan))
        lv = a.levels[0]
        gaps = np.diff(arrival_offsets(100.0, 3.0, "poisson", 1.0, np.random.default_rng(7)))
        scheduled_cv = gaps.std() / gaps.mean()
        assert lv.requests == len(gaps) + 1 > 200 and lv.ok == lv.requests
        assert scheduled_cv == pytest.approx(1.0, abs=0.15)
        if lv.arrival_cv != pytest.approx(scheduled_cv, abs=0.15) and lv.lag_p95_ms > 2.0:
            # the generator's own lateness, measured: on an overloaded host the sends stray from the schedule
            pytest.skip(f"send-time CV {lv.arrival_cv:.2f} vs the schedule's {scheduled_cv:.2f}: the generator ran "
                        f"late (lag p95 {lv.lag_p95_ms:.1f} ms, load {os.getloadavg()[0]:.1f})")
        assert lv.arrival_cv == pytest.approx(scheduled_cv, abs=0.15)
        assert lv.arrival_cv == pytest.approx(1.0, abs=0.2)
    finally:
        srv.shutdown()
        srv.server_close()


def _sent_prompts(truth_file: Path, export: Path) -> list[dict]:
    """The server's own records of the answered requests of a run's export (its prompt digests and heads)."""
    lines = [json.loads(x) for x in export.read_text().splitlines()]
    answered = [str(r["request_id"]) for r in lines if r["error"] == ""]
    truth = _truth(truth_file, answered)
    return [truth[i] for i in answered]


@pytest.mark.process
def test_every_request_of_a_run_gets_a_fresh_prompt_across_levels(stream_server, tmp_path):
    """Issue 32 item 2: the prompts restarted at every level (``itertools.cycle`` over one list of 1,000), so each
    level resent the earlier levels' prompts and an engine with prefix caching answered them from its cache. By
    the server's own record of what it was asked, no prompt of a run reaches it twice — over two levels of the
    same concurrency; with ``--shared-prefix`` every prompt starts with the same words and still differs after."""
    url, truth_file = stream_server
    export = tmp_path / "req.jsonl"
    res = gpusleuth("load", url + "/v1/completions", "--concurrency", "2,2", "--duration", "1",
                    "--input-tokens", "24", "--output-tokens", "2", "--export-requests", export, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = _sent_prompts(truth_file, export)
    shas = [r["prompt_sha"] for r in rows]
    assert len(rows) >= 20 and len(set(shas)) == len(shas), (len(rows), len(set(shas)))
    heads = {r["prompt_head"] for r in rows}
    assert len(heads) == len(rows)  # fresh from the first word: nothing shared by accident

    export2 = tmp_path / "shared.jsonl"
    res = gpusleuth("load", url + "/v1/completions", "--concurrency", "2", "--duration", "1", "--input-tokens", "24",
                    "--output-tokens", "2", "--shared-prefix", "16", "--export-requests", export2, timeout=120)
    assert res.returncode == 0, res.stderr
    rows = _sent_prompts(truth_file, export2)
    assert len(rows) >= 10 and len({r["prompt_head"] for r in rows}) == 1  # the same 16 words, on purpose
    assert len({r["prompt_sha"] for r in rows}) == len(rows)
    assert all(r["prompt_tokens"] >= 16 + 24 - 2 for r in rows)


@pytest.mark.process
def test_a_dataset_that_runs_out_is_resent_in_order_and_said(stream_server, tmp_path):
    """A folder of three prompts over two levels: sent in order across the run, never restarted per level; the
    resends past the third are counted in one sentence that names the prefix-cache risk."""
    url, truth_file = stream_server
    folder = tmp_path / "prompts"
    folder.mkdir()
    for k in range(3):
        (folder / f"{k}.txt").write_text(f"prompt number {k} " + "word " * 10)
    export = tmp_path / "req.jsonl"
    res = gpusleuth("load", url + "/v1/completions", "--concurrency", "1,1", "--requests", "2", "--prompts", folder,
                    "--output-tokens", "2", "--export-requests", export, "--no-warmup", timeout=120)
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in export.read_text().splitlines()]
    assert [r["prompt"] for r in lines] == [0, 1, 2, 0]  # the second level goes on where the first stopped
    assert "the 3 prompts given ran out: 1 of the 4 requests resent one" in res.stderr, res.stderr[-2000:]
