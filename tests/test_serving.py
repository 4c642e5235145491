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
          keep_alive: bool = True):
    """Record ``script`` under ``gpusleuth run``, drive it, stop it: (run, truth, statuses)."""
    port = free_port()
    out, truth = tmp_path / "run", tmp_path / "truth.json"
    proc = subprocess.Popen([sys.executable, "-m", "gpusleuth", "run", "--no-report", "--out", str(out), "--",
                             sys.executable, str(SERVERS / script), str(port), str(truth), *args],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_ready(port, proc)
        statuses = drive(port, threads, per_thread, keep_alive)
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


def test_stdlib_server_without_preprocessing_is_not_blamed_on_it(tmp_path):
    run, truth, statuses = serve(tmp_path, "http_infer.py", "plain", per_thread=30)
    check_against_truth(run, truth, 120, "http.server")
    _, found = findings_of(run)
    assert not any(f.cause.startswith("serving.") and f.cause != "serving.under_batched" for f in found), \
        [(f.cause, f.severity) for f in found]


def test_server_queue_is_measured_and_named(tmp_path):
    """One worker thread for four clients opening a connection per request: most latency is queue."""
    run, truth, statuses = serve(tmp_path, "http_infer.py", "queue", per_thread=20, keep_alive=False)
    check_against_truth(run, truth, 80, "http.server")
    facts, found = findings_of(run)
    assert facts.requests.queue_measured >= 80
    q = next(f for f in found if f.cause == "serving.queueing")
    assert q.severity == "high"
    assert not any(f.cause == "serving.preprocessing" for f in found)


def test_wsgiref_server(tmp_path):
    run, truth, _ = serve(tmp_path, "wsgi_infer.py", threads=3, per_thread=30)
    check_against_truth(run, truth, 90, "wsgi")
    _, found = findings_of(run)
    assert found[0].cause == "serving.preprocessing"


def test_fastapi_uvicorn_server(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    run, truth, _ = serve(tmp_path, "asgi_infer.py", threads=3, per_thread=30)
    check_against_truth(run, truth, 90, "asgi")
    model = run.requests.filter(run.requests["forwards"] > 0)
    assert (model["queue_ns"] >= 0).all()  # uvicorn's wait for the event loop is measured
    _, found = findings_of(run)
    assert found[0].cause == "serving.preprocessing"
