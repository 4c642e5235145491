"""BentoML's adaptive batching followed by identity (issue 32), end to end against the server's own clock:
a real ``@bentoml.service`` with ``@bentoml.api(batchable=True, max_batch_size=8)`` (tests/servers/bentoml_infer.py)
started by ``gpusleuth load … -- <python> -m bentoml serve …`` at concurrency 1, 4, 16 and at one Poisson rate
(100 requests/s).

BentoML 1.4 serves from a worker process that ``bentoml serve``'s arbiter starts; the request's handler, the
dispatcher (a ``collections.deque`` of jobs, a controller task created by the first request) and the batch's
forward (in a thread) all run in that worker. The hook follows each job from ``inbound_call`` to the batch that
``outbound_call`` ran (``hook/_gpusleuth_follow.py``); before, every request but the first was one sentence
"not attributed", and the first request carried the dispatcher's first forward as its own.

**Where BentoML comes from.** It is not in the test extra and must not be: it pins an OpenTelemetry (1.45.1,
instrumentation 0.66b1) that breaks Ray's dashboard agent, which the Ray Serve tests run. The fixture below
builds a virtual environment with ``--system-site-packages`` (torch, starlette, uvicorn and the rest shared
with the test environment) and ``bentoml==BENTOML`` installed inside it, once, under
``$GPUSLEUTH_TEST_CACHE`` (default ``~/.cache/gpusleuth-tests``), keyed by BentoML's version and Python's; later
runs reuse it (49 MB; the install took 6.4 s here). Where pip cannot reach an index the tests skip
with pip's own reason; any other failure of the install fails them. docs/serving.md says the same.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HostLoad, free_port
from test_serving import SERVERS, _env
from test_serving_followed import MAX_BATCH, _check_against_clock

BENTOML = "1.4.40"
_OFFLINE = ("Could not find a version", "No matching distribution", "NewConnectionError", "Network is unreachable",
            "Temporary failure in name resolution", "Failed to establish a new connection", "ConnectTimeout",
            "ReadTimeout", "ProxyError")


def bentoml_python() -> Path:
    """The venv's python with bentoml importable, built once under the cache (see the module's docstring)."""
    cache = Path(os.environ.get("GPUSLEUTH_TEST_CACHE", Path.home() / ".cache" / "gpusleuth-tests"))
    venv = cache / f"bentoml-{BENTOML}-py{sys.version_info[0]}{sys.version_info[1]}"
    py = venv / "bin" / "python"
    if (venv / ".complete").exists() and py.exists():
        return py
    tmp = venv.with_name(venv.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(tmp)], check=True, timeout=120)
    # the machine's pip constraints are the shared environment's; BentoML's own pins belong to this venv alone
    env = {**os.environ, "PIP_CONSTRAINT": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    res = subprocess.run([str(tmp / "bin" / "python"), "-m", "pip", "install", "-q", f"bentoml=={BENTOML}"], env=env,
                         capture_output=True, text=True, timeout=600)
    if res.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        err = res.stderr.strip().splitlines()[-1:] or ["(pip said nothing)"]
        if any(s in res.stderr for s in _OFFLINE):
            pytest.skip(f"bentoml=={BENTOML} could not be installed into a venv (no package index?): {err[0]}")
        raise AssertionError(f"pip install bentoml=={BENTOML} failed:\n{res.stderr[-3000:]}")
    (tmp / ".complete").write_text(BENTOML)
    shutil.rmtree(venv, ignore_errors=True)
    tmp.rename(venv)
    return py


def _load(tmp: Path, py: Path, flags: list[str]) -> tuple[dict, dict, str | None]:
    port = free_port()
    body = tmp / "body.json"
    body.write_text('{"input": [[1, 2, 3, 4]]}')  # one row: BentoML batches the rows of many requests
    out, truth = tmp / "run", tmp / "truth"
    env = {**_env(), "BENTO_TRUTH": str(truth), "BENTO_MAX_BATCH": str(MAX_BATCH), "BENTOML_HOME": str(tmp / "home"),
           "BENTOML_DO_NOT_TRACK": "True"}
    host = HostLoad()
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}/predict", *flags,
                          "--duration", "3", "--ready-timeout", "120", "--body-file", str(body), "--out", str(out),
                          "--", str(py), "-m", "bentoml", "serve", "bentoml_infer:Infer", "--port", str(port),
                          "--working-dir", str(SERVERS)], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stdout + res.stderr, (res.stdout + res.stderr)[-3000:]
    rep = subprocess.run([sys.executable, "-m", "gpusleuth", "report", str(out), "--json"], env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr[-3000:]
    merged: dict[str, list] = {"requests": [], "batches": []}
    for part in tmp.glob("truth.*"):  # one file per BentoML process that served
        for line in part.read_text().splitlines():
            rec = json.loads(line)
            merged["requests" if "request" in rec else "batches"].append(rec.get("request") or rec.get("batch"))
    return json.loads(rep.stdout), merged, host.crowded()


def _fits_a_batcher(rep: dict) -> dict:
    """The findings of a server that batches: the wait is the batch's, not a lock's, and no fix tells it to
    batch."""
    found = {f["cause"]: f for f in rep["findings"]}
    assert "serving.queueing" not in found, found["serving.queueing"]
    assert not any("dynamic batching" in f["fix"] for f in rep["findings"]), rep["findings"]
    return found


@pytest.fixture(scope="module")
def bento_py():
    pytest.importorskip("torch")
    return bentoml_python()


@pytest.mark.process
def test_bentoml_adaptive_batching_followed_against_its_clock(bento_py, tmp_path):
    """Closed loop at 1, 4, 16: every request tied to the batch BentoML put its job in, the batch wait share
    within 10 points of the worker's own clock, each level's batch sizes the dispatcher's own, never above 8 —
    and the wait is named for what it is (the model saturated at 16, not a lock or a missing batcher)."""
    rep, truth, crowded = _load(tmp_path, bento_py, ["--concurrency", "1,4,16"])
    assert truth["batches"] and max(b["size"] for b in truth["batches"]) <= MAX_BATCH
    _check_against_clock(rep, truth, "rids", "enqueued", crowded, ["c=1", "c=4", "c=16"])
    rs = rep["request_stages"]
    assert rs["levels"][0]["batch_size_max"] == 1  # one client: never more than one job in a batch
    found = _fits_a_batcher(rep)
    # one batch at a time (BentoML's semaphore): at 16 the jobs queue behind the running batch, said so
    assert "saturated" in found["serving.batch_wait"]["summary"], found.get("serving.batch_wait")
    # … and its fix names BentoML's own knob for more model copies, not Triton's (serving/rules/knobs.py)
    assert rs["framework"] == "bentoml"
    assert "BentoML: `workers` of `@bentoml.service`" in found["serving.batch_wait"]["fix"]
    assert "Triton" not in found["serving.batch_wait"]["fix"]


@pytest.mark.process
def test_bentoml_adaptive_batching_followed_at_a_poisson_rate(bento_py, tmp_path):
    """Open loop, Poisson arrivals at 100 requests/s: the same checks against the worker's clock. (At 150/s on
    a host at load 7 BentoML answered 71 of 400 with 503, shedding jobs that would wait past its 1 s
    ``max_latency_ms``; the server's budget is 10 s here, so that every request is one to follow.)"""
    rep, truth, crowded = _load(tmp_path, bento_py, ["--rate", "100", "--arrivals", "poisson"])
    assert truth["batches"] and max(b["size"] for b in truth["batches"]) <= MAX_BATCH
    _check_against_clock(rep, truth, "rids", "enqueued", crowded, ["100/s"])
    _fits_a_batcher(rep)


# BentoML's CorkDispatcher reduced to what the hook relies on (bentoml/_internal/marshal/dispatcher.py, 1.4):
# jobs on a deque, a controller task created inside the first request, each batch's outbound_call a task of the
# controller's, the forward in a thread with the context copied (anyio.to_thread), the futures resolved after it
DISPATCHER = r"""
import asyncio, collections, contextvars, sys, types
sys.path.insert(0, HOOK)
import _gpusleuth_autohook as core
core.activate()
import torch
import _gpusleuth_follow as follow
import _gpusleuth_request as serve

class Job:
    def __init__(self, data, future):
        self.data, self.future = data, future

class CorkDispatcher:
    def __init__(self, model):
        self.model, self.queue, self.controller_task = model, collections.deque(), None
    async def __call__(self, data):
        if self.controller_task is None:
            self.controller_task = asyncio.get_running_loop().create_task(self.controller())
        return await self.inbound_call(data)
    async def controller(self):
        while True:
            await asyncio.sleep(0.005)
            if self.queue:
                jobs = tuple(self.queue.popleft() for _ in range(min(3, len(self.queue))))
                asyncio.get_running_loop().create_task(self.outbound_call(jobs))
    async def inbound_call(self, data):
        fut = asyncio.get_running_loop().create_future()
        self.queue.append(Job(data, fut))
        return await fut
    async def outbound_call(self, jobs):
        ctx = contextvars.copy_context()
        x = torch.stack([j.data for j in jobs])
        y = await asyncio.get_running_loop().run_in_executor(None, ctx.run, self.model, x)
        for j, row in zip(jobs, y):
            j.future.set_result(row)

follow._patch_bentoml_dispatcher(types.SimpleNamespace(CorkDispatcher=CorkDispatcher))
disp = CorkDispatcher(torch.nn.Linear(4, 2))

async def handler(i):
    req = serve.begin("asgi")
    req.rid = str(1000 + i)
    await disp(torch.full((4,), float(i)))
    serve.end(req)

async def main():
    await handler(0)  # the first request creates the controller: its batches are not this request's own
    await asyncio.gather(*(handler(i) for i in range(1, 7)))

asyncio.run(main())
core.R.flush()
print("OK")
"""


@pytest.mark.process
def test_a_cork_dispatcher_batch_names_the_jobs_it_took(tmp_path):
    """The hook's BentoML patch on a stand-in dispatcher (no BentoML needed): each request's job gets a key of
    its own (an input's id is reused once it is freed: keys by id joined requests to other requests' batches,
    12 to a batch of 8 at most), each forward names the keys of its batch with the time the batch took them,
    and the first request — whose context the controller copied — runs no forward of its own."""
    hook = Path(__file__).resolve().parents[1] / "src" / "gpusleuth" / "hook"
    env = {**_env(), "GPUSLEUTH_RUN_DIR": str(tmp_path)}
    res = subprocess.run([sys.executable, "-c", f"HOOK = {str(hook)!r}\n" + DISPATCHER], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr
    lines = [ln.split("\t") for ln in next(tmp_path.glob("raw/events-*.tsv")).read_text().splitlines()]
    reqs, fwds = [ln for ln in lines if ln[0] == "R"], [ln for ln in lines if ln[0] == "F"]
    assert len(reqs) == 7 and all(r[9] == "0" for r in reqs), reqs  # no request ran a forward as its own
    keys = [r[-1] for r in reqs]
    assert len(set(keys)) == 7 and all(k.startswith("job-") for k in keys), keys
    named = [k.split("/") for f in fwds for k in f[6].split(",")]
    assert sorted(k for k, _ in named) == sorted(keys)  # every job in exactly one batch
    assert all(int(f[3]) == len(f[6].split(",")) <= 3 for f in fwds), fwds  # a forward's rows are its jobs
    by_key = {r[-1]: r for r in reqs}
    for k, taken in named:  # taken after its hand-off, before it was answered
        r = by_key[k]
        assert int(r[12]) <= int(taken) == int(r[13]) <= int(r[14]), r
    assert not [ln for ln in lines if ln[0] == "I" and "hook_error" in ln[2]]


UVICORN_APP = r"""
import sys
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

async def hello(request):
    return PlainTextResponse("ok")

uvicorn.run(Starlette(routes=[Route("/", hello)]), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


@pytest.mark.process
def test_a_uvicorn_server_stopped_by_sigterm_keeps_its_last_requests(tmp_path):
    """uvicorn shuts down gracefully on SIGTERM, then raises the signal again with its default action: the
    process dies without atexit. BentoML's arbiter stops its workers so, and the hook's lines buffered since its
    last half-second flush were lost (584 of a level's 624 requests recorded). Requests answered right before
    the SIGTERM are in the run."""
    pytest.importorskip("uvicorn")
    pytest.importorskip("starlette")
    import http.client
    import signal
    import time

    port, out, app = free_port(), tmp_path / "run", tmp_path / "app.py"
    app.write_text(UVICORN_APP)
    proc = subprocess.Popen([sys.executable, "-m", "gpusleuth", "run", "--no-report", "--out", str(out), "--",
                             sys.executable, str(app), str(port)], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/")
                conn.getresponse().read()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.stdout else ""
                time.sleep(0.2)
        time.sleep(1.2)  # the flusher wrote the readiness request: what follows is buffered
        for _ in range(5):
            conn.request("GET", "/")
            assert conn.getresponse().read() == b"ok"
        conn.close()
        proc.send_signal(signal.SIGTERM)  # gpusleuth run hands it to the server
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [ln for f in out.glob("raw/events-*.tsv") for ln in f.read_text().splitlines() if ln.startswith("R\t")]
    assert len(lines) == 6, (len(lines), proc.stdout.read() if proc.stdout else "")
