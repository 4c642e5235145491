"""Per-request stages of real servers under ``gpusleuth run`` (issue 16), checked against the servers' own
clocks, and the serving rules on them.

Each test starts a real server from ``tests/servers/`` under ``gpusleuth run``, drives it with a few threads of
``http.client`` (a test helper, not the product's load generator), stops it with SIGINT and reads the run
directory. The servers time their own stages with ``time.perf_counter`` and write the sums on shutdown.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, free_port
from gpusleuth.analysis.bundle import analyze
from gpusleuth.diagnosis.engine import diagnose
from gpusleuth.diagnosis.gather import build_facts
from gpusleuth.sources.rundir import load_run

SERVERS = REPO / "tests" / "servers"
BODY = ("The quick brown fox jumps over the lazy dog 12345 times; " * 200).encode()


def _env() -> dict:
    """This checkout's gpusleuth first on the path: the launcher computes the hook directory from the package
    it runs from, so the server gets this checkout's hook too."""
    env = dict(os.environ)
    src = str(REPO / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _wait_ready(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.stdout.read() if proc.stdout else ''}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/")
            if conn.getresponse().status == 200:
                conn.close()
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError("server did not answer")


def drive(port: int, threads: int, per_thread: int, keep_alive: bool = True) -> list[int]:
    """``threads`` clients each sending ``per_thread`` POSTs (one connection each, or one per request)."""
    statuses: list[int] = []
    lock = threading.Lock()

    def client():
        conn = None
        for _ in range(per_thread):
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            headers = {} if keep_alive else {"Connection": "close"}
            conn.request("POST", "/", body=BODY, headers=headers)
            resp = conn.getresponse()
            resp.read()
            with lock:
                statuses.append(resp.status)
            if not keep_alive:
                conn.close()
                conn = None

    ts = [threading.Thread(target=client) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return statuses


def serve(tmp_path: Path, script: str, *args: str, threads: int = 4, per_thread: int = 40,
          keep_alive: bool = True, alone: int = 0):
    """Record ``script`` under ``gpusleuth run``, drive it (``alone`` requests one at a time first), stop it:
    (run, truth, statuses)."""
    port = free_port()
    out, truth = tmp_path / "run", tmp_path / "truth.json"
    proc = subprocess.Popen([sys.executable, "-m", "gpusleuth", "run", "--no-report", "--out", str(out), "--",
                             sys.executable, str(SERVERS / script), str(port), str(truth), *args],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_ready(port, proc)
        statuses = drive(port, 1, alone, keep_alive) if alone else []
        statuses += drive(port, threads, per_thread, keep_alive)
        time.sleep(0.3)  # the last handlers finish their bookkeeping after the client has its answer
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    return load_run(out), json.loads(truth.read_text()), statuses


def findings_of(run):
    facts = build_facts(analyze(run))
    found, _ = diagnose(facts)
    return facts, [f for f in found if f.severity != "none"]


def truth_shares(t: dict) -> dict[str, float]:
    total = t["pre_s"] + t["infer_s"] + t["post_s"]
    return {k: t[f"{k}_s"] / total for k in ("pre", "infer", "post")}


def check_against_truth(run, truth: dict, sent: int, kind: str) -> dict[str, float]:
    """Every request seen once, one forward each, and the hook's split within 10 points of the server's."""
    r = run.requests
    model = r.filter(r["forwards"] > 0)
    assert truth["requests"] == sent
    assert len(model) == sent, (len(model), sent)  # the readiness GETs have no forward; nothing mixed
    assert set(model["forwards"].tolist()) == {1}
    assert set(model["kind"].tolist()) == {kind}
    assert set(model["status"].tolist()) == {200}
    service = (model["end_ns"] - model["start_ns"]).sum()
    hook = {k: model[f"{k}_ns"].sum() / service for k in ("pre", "infer", "post")}
    want = truth_shares(truth)
    for k in hook:
        assert abs(hook[k] - want[k]) < 0.10, (k, hook, want)
    # each request's infer is its one forward: same total, and no request holds two requests' forwards
    fwd = np.asarray(truth["forward_s"]) * 1e9
    assert abs(model["infer_ns"].sum() / fwd.sum() - 1) < 0.15
    assert model["infer_ns"].max() < fwd.max() * 1.3 + 1e6
    tok = sum(json.loads(s).get("tokenize", 0) for s in model["stages"])
    if truth["tokenize_s"]:
        assert abs(tok / 1e9 / truth["tokenize_s"] - 1) < 0.10
    return want


@pytest.mark.process
def test_stdlib_server_with_tokenization_names_preprocessing(tmp_path):
    run, truth, statuses = serve(tmp_path, "http_infer.py", "tokenize")
    assert statuses == [200] * 160
    want = check_against_truth(run, truth, 160, "http.server")
    assert (run.path / "requests.parquet").exists()
    facts, found = findings_of(run)
    top = found[0]
    assert top.cause == "serving.preprocessing", [(f.cause, f.severity) for f in found]
    share = next(e.value for e in top.evidence if e.name.startswith("before the model")) / 100
    assert abs(share - want["pre"]) < 0.15
    assert top.estimated_gain.speedup > 1.3
    assert facts.requests.stages[0].name == "tokenize"
    assert not any(f.cause == "serving.queueing" for f in found)


@pytest.mark.process
def test_stdlib_server_without_preprocessing_is_not_blamed_on_it(tmp_path):
    run, truth, statuses = serve(tmp_path, "http_infer.py", "plain", per_thread=30)
    check_against_truth(run, truth, 120, "http.server")
    _, found = findings_of(run)
    assert not any(f.cause.startswith("serving.") and f.cause != "serving.under_batched" for f in found), \
        [(f.cause, f.severity) for f in found]


@pytest.mark.process
def test_lock_around_the_model_is_waiting_not_preprocessing(tmp_path):
    """No preprocessing at all, but a lock around the forward: under 8 clients most of a request passes
    before the model, waiting for the others' forwards. The 20 requests sent one at a time first show that
    a request alone spends almost nothing before the model, so the preprocessing rule stays quiet and the
    wait is named as such."""
    run, truth, statuses = serve(tmp_path, "http_infer.py", "lock", threads=8, per_thread=20, alone=20)
    want = check_against_truth(run, truth, len(statuses), "http.server")
    assert want["pre"] > 0.3  # the server's own clock: the lock wait is most of its requests' time
    facts, found = findings_of(run)
    from gpusleuth.serving.rules.request_path import MIN_ALONE, PRE_MODERATE

    # alone, a request's pre is its body read and nothing else (0.10 measured on a quiet box): under the rule's
    # "waiting, not work" bound
    assert facts.requests.alone_requests >= MIN_ALONE and facts.requests.alone_shares["pre"] < PRE_MODERATE / 2
    assert not any(f.cause == "serving.preprocessing" for f in found), [(f.cause, f.title) for f in found]
    wait = next(f for f in found if f.title.startswith("Requests wait in front of the model"))
    assert wait.cause == "serving.queueing"


@pytest.mark.process
def test_server_queue_is_measured_and_named(tmp_path):
    """One worker thread for four clients opening a connection per request: most latency is queue."""
    run, truth, statuses = serve(tmp_path, "http_infer.py", "queue", per_thread=20, keep_alive=False)
    check_against_truth(run, truth, 80, "http.server")
    facts, found = findings_of(run)
    assert facts.requests.queue_measured >= 80
    q = next(f for f in found if f.cause == "serving.queueing")
    assert q.severity == "high"
    assert not any(f.cause == "serving.preprocessing" for f in found)


@pytest.mark.process
def test_handler_work_after_the_response_is_not_request_time(tmp_path):
    """A handler that keeps working 30 ms after writing its response (an access log sent somewhere slow):
    the client has its answer, so the request ends at the response's last write — counted to the
    handler's return, those 30 ms were 'post' and took the split 80 points away from the server's own."""
    run, truth, statuses = serve(tmp_path, "http_infer.py", "tokenize", "0.03", threads=2, per_thread=15)
    assert set(statuses) == {200}
    check_against_truth(run, truth, len(statuses), "http.server")


@pytest.mark.process
def test_wsgiref_server(tmp_path):
    run, truth, _ = serve(tmp_path, "wsgi_infer.py", threads=3, per_thread=30)
    check_against_truth(run, truth, 90, "wsgi")
    _, found = findings_of(run)
    assert found[0].cause == "serving.preprocessing"


@pytest.mark.process
def test_fastapi_uvicorn_server(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    run, truth, _ = serve(tmp_path, "asgi_infer.py", threads=3, per_thread=30)
    check_against_truth(run, truth, 90, "asgi")
    model = run.requests.filter(run.requests["forwards"] > 0)
    assert (model["queue_ns"] >= 0).all()  # uvicorn's wait for the event loop is measured
    _, found = findings_of(run)
    assert found[0].cause == "serving.preprocessing"


@pytest.mark.process
def test_flask_werkzeug_server(tmp_path):
    pytest.importorskip("flask")
    run, truth, _ = serve(tmp_path, "flask_infer.py", threads=3, per_thread=25)
    check_against_truth(run, truth, 75, "wsgi")  # werkzeug's handler is http.server's; the app is WSGI


# --------------------------------------------------------------------------- the R line, on its own
def test_damaged_request_lines_are_counted_losses_and_stage_names_cleaned(tmp_path):
    from gpusleuth.sources.events import parse_event_files

    raw = tmp_path / "raw"
    raw.mkdir()
    good = "R\t1000\t5000\t10\t1000\t2500\t1500\t200\thttp.server\t1\t4\t{}\n"
    hostile = "R\t6000\t9000\t-1\t500\t2000\t500\t200\tasgi\t1\t1\t" + json.dumps({"tok\x1b[31m\u202e": 300}) + "\n"
    damaged = ["R\t1000\tnope\t10\t1\t1\t1\t200\twsgi\t1\t1\t{}\n",  # not a number
               "R\t1000\t5000\t10\t1\t1\t1\t200\twsgi\t1\t1\t[1, 2]\n",  # stages not an object
               "R\t9000\t5000\t10\t1\t1\t1\t200\twsgi\t1\t1\t{}\n",  # ends before it starts
               "R\t1000\t5000\t10\t1\t1\t1\t200\twsgi\t99999999999999999999\t1\t{}\n",  # overflow
               "R\t1000\t5000\t10\t1\t1\t1\t200\twsgi\t1\t1\t{\"a\": \"x\"}\n",  # stage time not an int
               "R\t1000\t5000\n"]  # cut short
    (raw / "events-7.tsv").write_text('H\t{"pid": 7, "role": "main"}\n' + good + "".join(damaged) + hostile
                                      + "R\t1\t2")  # and a last line cut off mid-write
    ev = parse_event_files(tmp_path, None)
    r = ev.requests
    assert len(r) == 2 and r["kind"].tolist() == ["http.server", "asgi"]
    assert r["queue_ns"].tolist() == [10, -1] and r["pid"].tolist() == [7, 7]
    stages = json.loads(r["stages"][1])
    assert list(stages.values()) == [300]
    assert all(ch.isprintable() for ch in next(iter(stages)))
    assert any("7 unreadable line(s)" in loss for loss in ev.losses), ev.losses


# --------------------------------------------------------------------------- the rules, on numbers
def synthetic_run(n=200, pre=6e6, infer=3e6, post=1e6, queue=0, cores=1.0, gpu_util=None, spacing=None):
    """A Run holding ``n`` requests with the given parts (ns), the server's CPU samples and GPU samples."""
    from gpusleuth.run.model import Run, Table

    t0 = 1_700_000_000_000_000_000
    dur = int(pre + infer + post)
    spacing = spacing or dur // 2  # two requests in flight
    start = t0 + np.arange(n, dtype=np.int64) * spacing
    end = start + dur
    rows = {"pid": np.full(n, 42), "start_ns": start, "end_ns": end, "queue_ns": np.full(n, int(queue)),
            "pre_ns": np.full(n, int(pre)), "infer_ns": np.full(n, int(infer)), "post_ns": np.full(n, int(post)),
            "status": np.full(n, 200), "kind": np.full(n, "asgi", object), "forwards": np.ones(n, np.int64),
            "batch": np.ones(n, np.int64), "stages": np.full(n, "{}", object)}
    ts = np.arange(t0, int(end[-1]), 100_000_000, dtype=np.int64)
    run = Run(meta={"start_ns": t0 - 10**9, "end_ns": int(end[-1]) + 10**9, "source": "recorder"},
              requests=Table({k: np.asarray(v) for k, v in rows.items()}),
              procs=Table({"t_ns": ts, "pid": np.full(len(ts), 42), "cpu_pct": np.full(len(ts), cores * 100.0)}))
    if gpu_util is not None:
        run.gpu = Table({"t_ns": ts, "gpu": np.zeros(len(ts), np.int64), "util_gpu": np.full(len(ts), gpu_util),
                         "mem_used": np.full(len(ts), 2e9), "mem_total": np.full(len(ts), 80e9)})
    return run


def facts_for(run, levels=None):
    from types import SimpleNamespace

    from gpusleuth.analysis.outcomes import Outcomes, StepStats
    from gpusleuth.serving.analysis.requests import analyze_requests, split_by_levels
    from gpusleuth.diagnosis.facts import Facts

    ra = analyze_requests(run)
    facts = Facts(outcomes=Outcomes(wall_s=run.wall_s, startup_s=0.0, tail_s=0.0, time_share={}, time_s={},
                                    steps=StepStats()), gpus=[], host=None, gpu_note=None, requests=ra)
    if levels:
        facts.load = SimpleNamespace(levels=levels)
        ra.levels = split_by_levels(ra, run, levels)
    return facts


def levels_of(run, rps):
    """Load levels at concurrency 1, 4, 16 over thirds of the requests' span, with the given throughputs."""
    from types import SimpleNamespace

    lo, hi = int(run.requests["start_ns"].min()), int(run.requests["end_ns"].max()) + 1
    cut = np.linspace(lo, hi, 4).astype(np.int64)
    return [SimpleNamespace(level=i, concurrency=c, rate=0.0, start_ns=int(cut[i]), end_ns=int(cut[i + 1]), rps=r)
            for i, (c, r) in enumerate(zip((1, 4, 16), rps))]


def test_preprocessing_rule_earns_its_severity():
    from gpusleuth.serving.rules.request_path import preprocessing_in_request_path as rule

    pegged = synthetic_run(cores=1.0)
    f = rule(facts_for(pegged, levels_of(pegged, (50, 52, 51))))[0]
    assert (f.severity, f.confidence) == ("high", "high")
    assert abs(f.estimated_gain.step_share - 0.6) < 1e-6 and abs(f.estimated_gain.speedup - 2.5) < 1e-6
    assert facts_for(pegged, levels_of(pegged, (50, 52, 51))).requests.levels[2].requests > 0
    # throughput scales with concurrency: not GIL-bound, whatever the share
    assert rule(facts_for(pegged, levels_of(pegged, (50, 150, 400))))[0].severity == "moderate"
    # the process is mostly waiting (I/O) in its pre: not the GIL
    waiting = rule(facts_for(synthetic_run(cores=0.2)))[0]
    assert waiting.severity == "moderate" and "waiting" in waiting.summary
    # a request that is all model forward: quiet
    assert rule(facts_for(synthetic_run(pre=0.2e6, infer=9e6, post=0.8e6))) == []
    # too few requests to say anything
    assert rule(facts_for(synthetic_run(n=5))) == []


def test_under_batched_rule_fires_only_on_an_idle_accelerator_under_load():
    from gpusleuth.diagnosis.finding import Missing
    from gpusleuth.serving.rules.batching import under_batched as rule

    run = synthetic_run(pre=0.5e6, infer=8e6, post=0.5e6, cores=0.3, gpu_util=20.0)
    f = rule(facts_for(run, levels_of(run, (40, 120, 300))))[0]
    assert f.severity == "high" and "batch of 16" in f.fix
    assert rule(facts_for(run, levels_of(run, (40, 41, 40))))[0].severity == "moderate"  # flat: not proven
    busy = synthetic_run(pre=0.5e6, infer=8e6, post=0.5e6, gpu_util=90.0)
    assert rule(facts_for(busy, levels_of(busy, (40, 120, 300)))) == []
    assert isinstance(rule(facts_for(synthetic_run(pre=0.5e6, infer=8e6, post=0.5e6))), Missing)  # no GPU
    assert rule(facts_for(synthetic_run(gpu_util=10.0))) == []  # preprocessing-bound, not model-bound


def alone_then_loaded(alone_pre: float, loaded_pre: float, n: int = 30, loaded_infer: float = 3e6,
                      loaded_post: float = 1e6):
    """A run whose first n requests ran one at a time (pre ``alone_pre`` ns, a 3 ms forward, 1 ms after it)
    and the next n overlapped (pre ``loaded_pre``, forward ``loaded_infer``, after ``loaded_post`` ns)."""
    from gpusleuth.run.model import Table

    a = synthetic_run(pre=alone_pre, n=n, spacing=int(alone_pre + 4.5e6 + 1e6), cores=1.0)
    b = synthetic_run(pre=loaded_pre, infer=loaded_infer, post=loaded_post, n=n, cores=1.0)
    shift = int(a.requests["end_ns"].max()) + 10**6 - int(b.requests["start_ns"].min())
    rows = {k: np.concatenate([a.requests[k], b.requests[k] + shift if k in ("start_ns", "end_ns") else
                               b.requests[k]]) for k in a.requests.columns}
    a.requests = Table(rows)
    a.meta["end_ns"] = int(rows["end_ns"].max()) + 10**9
    return a


def test_pre_that_only_grows_under_load_is_waiting_not_preprocessing():
    from gpusleuth.serving.rules.request_path import preprocessing_in_request_path as pre_rule
    from gpusleuth.serving.rules.request_path import waiting_before_the_model as wait_rule

    lock = facts_for(alone_then_loaded(alone_pre=0.1e6, loaded_pre=20e6))
    assert lock.requests.alone_requests == 30 and lock.requests.alone_shares["pre"] < 0.05
    assert pre_rule(lock) == []
    w = wait_rule(lock)[0]
    assert w.cause == "serving.queueing" and w.severity == "high" and "alone" in w.title
    # a tokenizer costs its time alone too: preprocessing, and no waiting finding
    tok = facts_for(alone_then_loaded(alone_pre=6e6, loaded_pre=20e6))
    assert pre_rule(tok)[0].cause == "serving.preprocessing"
    assert wait_rule(tok) == []
    # the same wait on a server that batches (its forwards outside the requests, Ray's @serve.batch): the batch
    # rules price its collection; no lock blamed, no "batch them" to a batcher (issue 32 item 5)
    from gpusleuth.serving.analysis.batch_stats import BatchStats

    batcher = facts_for(alone_then_loaded(alone_pre=0.1e6, loaded_pre=20e6))
    batcher.requests.batching = BatchStats(requests=60, unattributed=0, forwards=12, forwards_joined=12, size_p50=5.0,
                                           size_p90=8.0, size_max=8, sizes={"5": 12}, rows_p50=5.0, wait_share=0.6,
                                           queued_share=0.2, collect_share=0.4, wait_p50_ms=12.0, wait_p95_ms=20.0,
                                           collect_p50_ms=8.0, forward_p50_ms=4.5, own_p50_ms=1.0, multi_forward=0,
                                           prefill_p50_ms=None, decode_p50_ms=None)
    assert wait_rule(batcher) == []
    # no request ever alone: the split alone is unknown, the preprocessing rule reads the loaded shares
    busy = facts_for(synthetic_run(pre=20e6, cores=1.0))
    assert busy.requests.alone_requests == 0
    assert pre_rule(busy)[0].cause == "serving.preprocessing" and wait_rule(busy) == []


def test_queueing_rule():
    from gpusleuth.serving.rules.request_path import queueing as rule

    q = rule(facts_for(synthetic_run(pre=0.5e6, infer=4e6, post=0.5e6, queue=12e6)))[0]
    assert q.severity == "high" and q.estimated_gain.wall_share == 0.0
    # queue behind preprocessing: a symptom, held at moderate
    assert rule(facts_for(synthetic_run(queue=12e6)))[0].severity == "moderate"
    assert rule(facts_for(synthetic_run(queue=0.1e6))) == []


HOOK_UNIT = r"""
import sys, time
sys.path.insert(0, HOOK)
import _gpusleuth_autohook as core
core.activate()
import torch
import gpusleuth
import _gpusleuth_request as serve

model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
real_call = torch.nn.Module.__dict__["__call__"]
model(torch.randn(1, 4))  # outside any request: not counted, nothing wrapped
with gpusleuth.stage("outside"):  # a stage outside a request does nothing
    pass
assert torch.nn.Module.__dict__["__call__"] is real_call

class Boom(torch.nn.Module):
    def forward(self, x):
        raise ValueError("the user's own error")

req = serve.begin("http.server")
assert serve.begin("wsgi") is None  # a framework inside a server: the outer request counts
assert torch.nn.Module.__dict__["__call__"] is not real_call
with gpusleuth.stage("tok\tenize\n"):
    model(torch.randn(2, 4))
try:
    Boom()(torch.randn(1, 4))
except ValueError as exc:
    assert str(exc) == "the user's own error"
else:
    raise AssertionError("the forward's exception was swallowed")
model(torch.randn(3, 4))
serve.end(req)
time.sleep(2.7)  # the flusher puts Module.__call__ back once no request was open for 2 s
assert torch.nn.Module.__dict__["__call__"] is real_call, "Module.__call__ still wrapped"
core.R.flush()
print("OK")
"""


@pytest.mark.process
def test_hook_in_a_process_outside_a_server(tmp_path):
    """The hook's request API directly: nesting, a forward that raises (the user's exception unchanged and
    still counted), stage names cleaned, forwards outside a request ignored, ``Module.__call__`` restored."""
    hook = REPO / "src" / "gpusleuth" / "hook"
    env = {**_env(), "GPUSLEUTH_RUN_DIR": str(tmp_path)}
    res = subprocess.run([sys.executable, "-c", f"HOOK = {str(hook)!r}\n" + HOOK_UNIT], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr
    lines = [ln.split("\t") for ln in next(tmp_path.glob("raw/events-*.tsv")).read_text().splitlines()]
    reqs = [ln for ln in lines if ln[0] == "R"]
    assert len(reqs) == 1
    r = reqs[0]
    assert r[8] == "http.server" and r[9] == "3" and r[10] == "2"  # three forwards, the first one's 2 rows
    assert list(json.loads(r[11])) == ["tok enize "]
    assert not [ln for ln in lines if ln[0] == "I" and "hook_error" in ln[2]]


def _load_and_report(tmp_path: Path, mode: str, script: str = "http_infer.py", concurrency: str = "1,4,16",
                     body_bytes: bytes = BODY, *more: str, flags: tuple[str, ...] = ()):
    """The issue's own command: ``gpusleuth load URL --concurrency 1,4,16 -- python server.py PORT`` (the server
    started under recording by gpusleuth, loaded level by level, stopped), then the report's JSON."""
    port = free_port()
    out, truth = tmp_path / "run", tmp_path / "truth.json"
    tmp_path.mkdir(parents=True, exist_ok=True)
    body = tmp_path / "body.txt"
    body.write_bytes(body_bytes)
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}/",
                          "--concurrency", concurrency, "--duration", "3", "--body-file", str(body), "--out", str(out),
                          *flags, "--", sys.executable, str(SERVERS / script), str(port), str(truth), mode, *more],
                         env=_env(), capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    rep = subprocess.run([sys.executable, "-m", "gpusleuth", "report", str(out), "--json"], env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr[-3000:]
    return res.stdout + res.stderr, json.loads(rep.stdout), json.loads(truth.read_text())


@pytest.mark.slow
def test_gpusleuth_load_on_a_tokenizing_server_names_preprocessing(tmp_path):
    """Issue 16's must-show: a row per level, the top finding preprocessing in the request path, its share
    of request time within 15 points of the server's own timing; the same server without preprocessing is
    not blamed on it."""
    text, rep, truth = _load_and_report(tmp_path / "tok", "tokenize")
    levels = rep["serving"]["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 4, 16] and all(lv["ok"] > 0 for lv in levels)
    for c in ("1", "4", "16"):
        assert any(line.split()[:1] == [c] or line.split()[2:3] == [c] for line in text.splitlines()), text
    top = [f for f in rep["findings"] if f["severity"] != "none"][0]
    assert top["cause"] == "serving.preprocessing", [(f["cause"], f["severity"]) for f in rep["findings"]]
    share = next(e["value"] for e in top["evidence"] if e["name"].startswith("before the model")) / 100
    assert abs(share - truth_shares(truth)["pre"]) < 0.15, (share, truth_shares(truth))

    _, plain, _ = _load_and_report(tmp_path / "plain", "plain")
    assert not [f for f in plain["findings"] if f["cause"] == "serving.preprocessing" and f["severity"] != "none"]


def test_a_requests_own_preprocessing_is_seen_when_load_spreads_the_gil_wait():
    """A tokenizer that is 60 % of a request alone, whose share before the model drops under load because the
    GIL wait lands after the model too (the stdlib tokenizing server measured 29 % overall, 74 % alone, on a
    quiet box): preprocessing, from the requests that ran alone. Preprocessing that load made a small part
    of the request (under 15 % overall) stays quiet."""
    from gpusleuth.serving.rules.request_path import preprocessing_in_request_path as pre_rule

    spread = facts_for(alone_then_loaded(alone_pre=6e6, loaded_pre=3e6, loaded_infer=12e6, loaded_post=10e6))
    ra = spread.requests
    assert ra.alone_shares["pre"] > 0.5 and 0.15 <= ra.shares["pre"] < 0.30
    (f,) = pre_rule(spread)
    assert f.cause == "serving.preprocessing" and "alone)" in f.title and "alone in the server" in f.summary
    assert abs(f.estimated_gain.step_share - ra.shares["pre"]) < 1e-9  # the gain stays the overall share
    # the same lone requests, but load made preprocessing a sliver of the request: nothing to name
    sliver = facts_for(alone_then_loaded(alone_pre=6e6, loaded_pre=0.3e6, loaded_infer=40e6, loaded_post=30e6))
    assert sliver.requests.alone_shares["pre"] > 0.5 and sliver.requests.shares["pre"] < 0.15
    assert pre_rule(sliver) == []
