"""Requests followed across processes by the framework's own id (issue 32): LitServe's inference worker and
Ray Serve's replica with ``@serve.batch``, started by ``gpusleuth load … -- server``, against each server's
own clock (the request's span — LitServe's ASGI app, Ray's replica call —, when it enqueued the request, which ids
each batch's forward took — taken with the framework's own ids in tests/servers/litserve_infer.py and
ray_infer.py; the waits also request by request); and the join itself on
hand-built rows: identity before time windows, and the sentence for what cannot be followed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import HostLoad, free_port
from test_serving import SERVERS, _env

from gpusleuth.analysis.host_telemetry import server_cpu
from gpusleuth.serving.analysis.batching import join_batches
from gpusleuth.serving.analysis.follow import elsewhere_note, follow_note, native_note
from gpusleuth.serving.run.engine_samples import EngineSample
from gpusleuth.serving.run.request_ids import request_keys
from gpusleuth.sources.inputs import read_inputs
from gpusleuth.run.model import ProcessInfo, Run, Table

MAX_BATCH = 8


CLOSED = ("--concurrency", "1,4,16")


def _poisson(rate: int) -> tuple[str, ...]:
    """One open-loop level: Poisson arrivals (exponential gaps, seeded) at ``rate`` requests/s."""
    return ("--rate", str(rate), "--arrivals", "poisson", "--seed", "3")


def _load(tmp: Path, script: str, path: str, levels: tuple[str, ...] = CLOSED,
          extra: tuple[str, ...] = ()) -> tuple[dict, dict, str | None, Path]:
    port = free_port()
    body = tmp / "body.json"
    body.write_text('{"input": [1, 2, 3, 4]}')
    out, truth = tmp / "run", tmp / "truth.json"
    host = HostLoad()  # the wait share's 10 points hold on a quiet host: what others took is measured here
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}{path}",
                          *levels, "--duration", "3", "--ready-timeout", "180", "--body-file",
                          str(body), "--out", str(out), "--", sys.executable, str(SERVERS / script), str(port),
                          str(truth), str(MAX_BATCH), "10", *extra], env=_env(), capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    rep = subprocess.run([sys.executable, "-m", "gpusleuth", "report", str(out), "--json"], env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr[-3000:]
    return json.loads(rep.stdout), json.loads(truth.read_text()), host.crowded(), out


def _level(lv: dict) -> str:
    return f"c={lv['concurrency']}" if lv.get("concurrency") else f"{lv['rate']:g}/s"


CROWDED_MISS = 0.25  # a batch wait share this far off the server's clock fails even on a crowded host


def _check_against_clock(rep: dict, truth: dict, ids: str, enqueued: str, crowded: str | None,
                         want: list[str]) -> None:
    """Per level: every request attributed, the batch wait share within 10 points of the server's own, each
    forward's size the server's own batch by batch, never above its max_batch_size."""
    rs = rep["request_stages"]
    failed = [f"{_level(lv)}: {lv['timeouts']} timed out, {lv['errors']} errors of {lv['requests']}"
              for lv in rep["serving"]["levels"] if lv["timeouts"] or lv["errors"]]
    if failed and crowded:
        # the server's clock records only the requests its handler finished; clients that gave up leave requests
        # the model ran for (or dropped) that it does not list (Ray, p50 4.4 s with the host's CPU 99.9 % busy: 48
        # of 235 timed out): nothing here to check the join against
        pytest.skip(f"the server was overloaded ({'; '.join(failed)}) and {crowded}: this needs a quiet host")
    assert rs["note"] is None, rs["note"]
    assert rs["batching"]["unattributed"] == 0
    batch_of = {rid: b for b in truth["batches"] for rid in b[ids]}
    assert all(b["size"] == len(b[ids]) <= MAX_BATCH for b in truth["batches"])
    levels = rep["serving"]["levels"]
    assert [_level(lv) for lv in levels] == want
    missed = []
    for lv, mine in zip(levels, rs["levels"]):
        s, e = lv["start_ns"], lv["end_ns"]
        reqs = [r for r in truth["requests"] if s <= r["start"] < e and r[ids[:-1]] in batch_of]
        assert mine["requests"] == len(reqs) > 0, (_level(lv), mine["requests"], len(reqs))
        share = sum(batch_of[r[ids[:-1]]]["start"] - r[enqueued] for r in reqs) / sum(r["end"] - r["start"]
                                                                                      for r in reqs)
        print(f"{_level(lv)}: batch wait share {mine['shares']['wait']:.3f} (server's clock {share:.3f}), "
              f"batch sizes max {mine['batch_size_max']}")
        if abs(mine["shares"]["wait"] - share) >= 0.10:
            missed.append((_level(lv), round(mine["shares"]["wait"], 3), round(share, 3)))
        sizes = [b["size"] for b in truth["batches"] if s <= b["start"] < e]
        vals, counts = np.unique(sizes, return_counts=True)
        mine_sizes = {int(k): v for k, v in mine["batch_sizes"].items()}
        assert mine["batch_size_max"] <= MAX_BATCH
        # forwards named by identity: the server's own batches (a level's edge may move one forward across it)
        assert sum(abs(mine_sizes.get(int(v), 0) - int(c)) for v, c in zip(vals, counts)) <= 2, \
            (_level(lv), mine_sizes, dict(zip(vals.tolist(), counts.tolist())))
    # the request's time before its batch grows with the host's load (Ray, when its clock was the handler's and its
    # wait began at the body's arrival: c=1 -13 points at load 6, -7 quiet): measured, not assumed. Load moves a
    # share by points, not by tens of them: a wait lost altogether (from the batcher's take instead of the hand-off:
    # BentoML at 16, 0.04 against 0.64; Ray with a quarter of its wait, 0.16 against 0.64) or one from the call's
    # start (Ray at 16, 0.77 against 0.17) fails on any host
    gross = [m for m in missed if abs(m[1] - m[2]) >= CROWDED_MISS]
    assert not gross, f"batch wait share off by {CROWDED_MISS:.2f} or more (level, gpusleuth, server): {gross}"
    if missed and crowded:
        pytest.skip(f"batch wait share off by 10 points or more (level, gpusleuth, server) {missed}, but "
                    f"{crowded}: this needs a quiet host")
    assert not missed, missed


@pytest.fixture(scope="module")
def litserve_run(tmp_path_factory):
    pytest.importorskip("litserve")
    return _load(tmp_path_factory.mktemp("litserve"), "litserve_infer.py", "/predict")


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory):
    pytest.importorskip("ray.serve")
    return _load(tmp_path_factory.mktemp("ray"), "ray_infer.py", "/")


@pytest.fixture(scope="module")
def ray_ingress_run(tmp_path_factory):
    pytest.importorskip("ray.serve")
    pytest.importorskip("fastapi")
    return _load(tmp_path_factory.mktemp("ray_ingress"), "ray_infer.py", "/predict", extra=("fastapi",))


# one Poisson rate each, below the server's capacity on 2 cores (LitServe ~200/s, Ray ~100/s measured), so batches
# form from arrivals that bunch by chance rather than from a closed loop's lockstep (Ray at 90/s: 0.359 against
# 0.358 at load 5)
LITSERVE_RATE, RAY_RATE = 150, 90


@pytest.fixture(scope="module")
def litserve_poisson_run(tmp_path_factory):
    pytest.importorskip("litserve")
    return _load(tmp_path_factory.mktemp("litserve_poisson"), "litserve_infer.py", "/predict", _poisson(LITSERVE_RATE))


@pytest.fixture(scope="module")
def ray_poisson_run(tmp_path_factory):
    pytest.importorskip("ray.serve")
    return _load(tmp_path_factory.mktemp("ray_poisson"), "ray_infer.py", "/", _poisson(RAY_RATE))


@pytest.mark.process
def test_litserve_worker_requests_followed_against_its_clock(litserve_run):
    """LitServe: the handler in its uvicorn process, the model in its spawned inference worker, batches of up to
    8 collected within 10 ms. Each request is followed by LitServe's uid into the worker's forwards."""
    rep, truth, crowded, out = litserve_run
    _check_against_clock(rep, truth, "uids", "submit", crowded, ["c=1", "c=4", "c=16"])
    _waits_agree_request_by_request(out, truth, "uids", "submit", LITSERVE_WAIT_MEDIAN_MS)
    rs = rep["request_stages"]
    # the server is its processes: the worker's forwards count in its CPU, not only the idle-ish handler
    assert len(rs["pids"]) >= 1 and rs["levels"][-1]["server_cores"] > 0.3
    _whole_server_on_the_host_line(rep, 3)  # the launcher, uvicorn's process, the inference worker
    _fixes_name_the_frameworks_knobs(rep, "litserve")


@pytest.mark.process
def test_ray_serve_batch_requests_followed_against_its_clock(ray_run):
    """Ray Serve: a replica actor behind Ray's proxy, ``@serve.batch(max_batch_size=8)``. Each replica call is a
    request named by Ray's request id (the client's X-Request-Id); each batch's forward names its requests."""
    rep, truth, crowded, out = ray_run
    _check_against_clock(rep, truth, "rids", "enqueued", crowded, ["c=1", "c=4", "c=16"])
    _waits_agree_request_by_request(out, truth)
    # Ray's request id is the client's: the server's rows join the client's one to one
    assert all(lv["outside_joined"] > 0 for lv in rep["request_stages"]["levels"])
    _whole_server_on_the_host_line(rep, 4)  # the driver, raylet, GCS, the proxy and the replica at least
    _fixes_name_the_frameworks_knobs(rep, "ray_serve")


WAIT_MEDIAN_MS = 0.3  # gpusleuth's wait against the server's, request by request: the median of the differences
# LitServe's: no await between its clock's submit and the hand-off (a uuid, a callback), nor between the forward's start
# and its predict's; the hook's early hand-off read a median 0.22-0.25 ms at 1 client and 150/s, under 0.3
LITSERVE_WAIT_MEDIAN_MS = 0.1


def _waits_agree_request_by_request(out: Path, truth: dict, ids: str = "rids", enqueued: str = "enqueued",
                                    most_ms: float = WAIT_MEDIAN_MS) -> None:
    """Joined by the client's X-Request-Id (Ray's request id; LitServe's handler reads it, its batches name their
    requests by LitServe's uid: ``ids="uids"``), each request's wait as gpusleuth measured it (its hand-off to the
    batch's forward) against the server's own (``enqueued`` → its batch's start), request by request: the shares
    above hold a wait that starts a millisecond early by a few points only. Ray: the body's arrival taken for the
    hand-off, a median 1.0-1.4 ms per request, shares 5-7 points high; measured after, 0.04-0.06 ms (the batch
    wrapper's code before its put, ``torch.stack`` before the forward) at load 5 on 2 shared cores. LitServe: anyio's
    worker thread (FastAPI's sync auth dependency) taken for the hand-off, 0.2-1.1 ms; measured after, see
    docs/serving.md. No event-loop turn in either, so the host's load does not move it."""
    run = read_inputs([out]).job
    join = join_batches(run.requests, run.batches)
    assert join is not None
    batch_of = {rid: b for b in truth["batches"] for rid in b[ids]}
    key = ids[:-1]  # the id a request's record names its batch by: Ray's rid, LitServe's uid
    theirs = {r["rid"]: batch_of[r[key]]["start"] - r[enqueued] for r in truth["requests"] if r[key] in batch_of}
    rids = request_keys(run.requests["request_id"])
    diff = np.asarray([int(w) - theirs[rids[i]] for i, w in zip(join.index.tolist(), join.parts["wait_ns"].tolist())
                       if rids[i] in theirs]) / 1e6
    assert len(diff) == len(theirs), (len(diff), len(theirs))  # every request the server served, joined by its id
    med = float(np.median(np.abs(diff)))
    print(f"wait against the server's, request by request: |median| {med:.3f} ms, "
          f"p90 {np.percentile(np.abs(diff), 90):.3f} ms over {len(diff)}")
    assert med <= most_ms, (med, np.percentile(diff, [5, 50, 95]).round(3).tolist())


def _fixes_name_the_frameworks_knobs(rep: dict, framework: str) -> None:
    """The hook said which framework it followed (its ``serving_framework`` fact, from the process that imported
    it), so no fix of this run names another server's knobs (Triton's, TorchServe's): serving/rules/knobs.py."""
    assert rep["request_stages"]["framework"] == framework
    assert not [(f["cause"], f["fix"]) for f in rep["findings"] if "Triton" in f["fix"] or "TorchServe" in f["fix"]]


def _whole_server_on_the_host_line(rep: dict, processes: int) -> None:
    """The Host line's server CPU is every process of the server while it served — the load table's figure, each
    level weighted by its time — not its main process (LitServe's and Ray's launcher, which read 6 % of a core)."""
    host, levels = rep["host"], rep["serving"]["levels"]
    assert host["server_processes"] >= processes, host["server_processes"]
    spans = [(lv["end_ns"] - lv["start_ns"]) / 1e9 for lv in levels]
    table = sum(lv["server_cpu_cores"] * s for lv, s in zip(levels, spans)) / sum(spans)
    assert host["server_cores"] == pytest.approx(table, abs=0.15), (host["server_cores"], table)
    assert host["server_cores"] > host["main_cpu_pct_mean"] / 100 + 0.1, host


@pytest.mark.process
def test_ray_serve_behind_a_fastapi_ingress_followed_against_its_clock(ray_ingress_run):
    """The same replica behind ``@serve.ingress(app)``: Ray's proxy → the replica's call → FastAPI's app → the
    route → ``serve.batch``. FastAPI's own request (Starlette, patched by the hook) sits inside Ray's call and
    must not open a second request or hide the batch's forwards: the same numbers as the plain deployment."""
    rep, truth, crowded, out = ray_ingress_run
    _check_against_clock(rep, truth, "rids", "enqueued", crowded, ["c=1", "c=4", "c=16"])
    _waits_agree_request_by_request(out, truth)
    rs = rep["request_stages"]
    assert set(rs["kinds"]) == {"ray"}, rs["kinds"]  # one request per call: Ray's, not a second FastAPI one
    assert all(lv["outside_joined"] > 0 for lv in rs["levels"])


def _poisson_level(rep: dict, rate: int) -> None:
    """The level was open loop at ``rate`` with Poisson arrivals: its send times' gaps spread as exponential
    gaps do (coefficient of variation ≈ 1; constant spacing reads ≈ 0)."""
    load = rep["serving"]
    assert load["arrivals"] == "poisson" and [lv["rate"] for lv in load["levels"]] == [rate]
    assert load["levels"][0]["arrival_cv"] == pytest.approx(1.0, abs=0.25)


@pytest.mark.process
def test_litserve_poisson_rate_followed_against_its_clock(litserve_poisson_run):
    """LitServe under one Poisson rate (open loop): the same identity join, against the same clock."""
    rep, truth, crowded, out = litserve_poisson_run
    _poisson_level(rep, LITSERVE_RATE)
    _check_against_clock(rep, truth, "uids", "submit", crowded, [f"{LITSERVE_RATE}/s"])
    _waits_agree_request_by_request(out, truth, "uids", "submit", LITSERVE_WAIT_MEDIAN_MS)


@pytest.mark.process
def test_ray_serve_poisson_rate_followed_against_its_clock(ray_poisson_run):
    """Ray Serve's ``serve.batch`` under one Poisson rate (open loop), against the replica's clock."""
    rep, truth, crowded, out = ray_poisson_run
    _poisson_level(rep, RAY_RATE)
    _check_against_clock(rep, truth, "rids", "enqueued", crowded, [f"{RAY_RATE}/s"])
    _waits_agree_request_by_request(out, truth)


# Ray Serve's replica call reduced to what the hook relies on (ray/serve/_private/replica.py, http_util.py, 2.60): the
# call (``Replica._wrap_request``), Ray's own receive proxy filling the request's body from the proxy onto its
# asyncio.Queue in a task started inside the call, the handler reading it and handing its input to a batcher of
# serve.batch's shape ((input, future) on an asyncio.Queue, a loop task outside any request)
RAY_RECEIVE = r"""
import asyncio, contextlib, pickle, sys, time, types
sys.path.insert(0, HOOK)
import _gpusleuth_autohook as core
core.activate()
import torch
from ray.serve._private.http_util import ASGIReceiveProxy
import _gpusleuth_follow as follow

class Replica:  # Ray's Replica reduced to the call the hook opens a request for
    @contextlib.contextmanager
    def _wrap_request(self, request_metadata):
        yield None

follow._patch_ray_replica(types.SimpleNamespace(Replica=Replica, ASGIReceiveProxy=ASGIReceiveProxy))
model = torch.nn.Linear(4, 2)
work = asyncio.Queue()
ENQ = {}

async def batcher():  # serve.batch's shape: (input, future) on an asyncio.Queue, a loop task that runs the batch
    while True:
        items = [await work.get()]
        await asyncio.sleep(0.005)
        while not work.empty() and len(items) < 4:
            items.append(work.get_nowait())
        with torch.no_grad():
            y = model(torch.stack([x for x, _ in items]))
        for (_, fut), row in zip(items, y):
            fut.set_result(row)

async def body_from_proxy(meta, _sent=set()):
    if meta.request_id in _sent:  # the body was sent: the next message is the disconnect, when the call is done
        await asyncio.sleep(3600)
    _sent.add(meta.request_id)
    return pickle.dumps([{"type": "http.request", "body": b"[1, 2, 3, 4]", "more_body": False}])

async def call(replica, i):  # the replica's call: its receive proxy fetches the body while the handler starts
    meta = types.SimpleNamespace(request_id="req-%04d-ab" % i)
    with replica._wrap_request(meta):
        receive = ASGIReceiveProxy({"type": "http"}, meta, body_from_proxy)
        fetch = asyncio.create_task(receive.fetch_until_disconnect())
        await asyncio.sleep(0.02)  # the handler wakes late: the body waits in the replica's queue meanwhile
        msg = await receive()
        fut = asyncio.get_running_loop().create_future()
        ENQ[meta.request_id] = time.time_ns()
        work.put_nowait((torch.full((4,), float(len(msg["body"]))), fut))
        await fut
        fetch.cancel()

async def main():
    loop_task = asyncio.create_task(batcher())
    replica = Replica()
    await asyncio.gather(*(call(replica, i) for i in range(6)))
    loop_task.cancel()

asyncio.run(main())
core.R.flush()
for rid, t in ENQ.items():
    print("ENQ", rid, t)
print("OK")
"""


def _hooked_handoffs(tmp_path: Path, script: str) -> tuple[dict[str, int], list[list[str]], list[int], list[list[str]]]:
    """Run ``script`` (it prints ``ENQ <key> <ns>`` where its handler hands work to its batcher, then ``OK``) in a
    child with the hook: the handler's own stamps, the hook's request rows, its forwards' starts and every line."""
    hook = Path(__file__).resolve().parents[1] / "src" / "gpusleuth" / "hook"
    env = {**_env(), "GPUSLEUTH_RUN_DIR": str(tmp_path)}
    res = subprocess.run([sys.executable, "-c", f"HOOK = {str(hook)!r}\n" + script], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-3000:]
    enq = {ln.split()[1]: int(ln.split()[2]) for ln in res.stdout.splitlines() if ln.startswith("ENQ ")}
    lines = [ln.split("\t") for ln in next(tmp_path.glob("raw/events-*.tsv")).read_text().splitlines()]
    reqs, fwds = [ln for ln in lines if ln[0] == "R"], [ln for ln in lines if ln[0] == "F"]
    assert sorted(r[15] for r in reqs) == sorted(enq) and len(enq) == 6, (reqs, enq)
    return enq, reqs, sorted(int(f[1]) for f in fwds), lines


@pytest.mark.process
def test_a_ray_replica_reading_its_body_hands_nothing_over(tmp_path):
    """A Ray replica buffers each request's body, fetched from Ray's proxy, on an asyncio.Queue inside the request
    (``ASGIReceiveProxy``): that put was the request's hand-off, so its wait for its batch began when its body
    arrived — the handler's wake-up and input building counted as batch wait (0.7 ms a request at 1 client, 2.7 at
    16, measured against the replica's clock; 20 ms here, where the handler wakes 20 ms late), and the handler's
    get of its body counted as a stream's token. The hand-off is the put to the batcher."""
    pytest.importorskip("ray.serve")
    enq, reqs, starts, lines = _hooked_handoffs(tmp_path, RAY_RECEIVE)
    for r in reqs:
        handoff, received, gets = int(r[12]), int(r[17]), int(r[18])
        # the hand-off is the put to the batcher, after the handler stamped it and before the batch's forward
        assert enq[r[15]] <= handoff <= min(t for t in starts if t >= enq[r[15]]), (r, enq[r[15]])
        assert (received, gets) == (-1, 0), r  # the body's get is no token of a stream
    assert not [ln for ln in lines if ln[0] == "I" and "hook_error" in ln[2]]


SYNC_DEPENDENCY = r"""
import asyncio, sys, time
sys.path.insert(0, HOOK)
import _gpusleuth_autohook as core
core.activate()
import torch, httpx
from fastapi import Depends, FastAPI, Request

model = torch.nn.Linear(4, 2)
work = asyncio.Queue()
ENQ = {}

def no_auth():  # LitServe's default auth: a sync dependency, which FastAPI runs on anyio's worker thread
    pass

async def batcher():
    while True:
        items = [await work.get()]
        await asyncio.sleep(0.005)
        while not work.empty() and len(items) < 4:
            items.append(work.get_nowait())
        with torch.no_grad():
            y = model(torch.stack([x for x, _ in items]))
        for (_, fut), row in zip(items, y):
            fut.set_result(row)

app = FastAPI()

@app.post("/predict", dependencies=[Depends(no_auth)])
async def predict(request: Request):
    x = torch.tensor(await request.json(), dtype=torch.float32)
    await asyncio.sleep(0.02)  # the handler reads its body and wakes late: no batch wait yet
    ENQ[request.headers["x-request-id"]] = time.time_ns()
    fut = asyncio.get_running_loop().create_future()
    work.put_nowait((x, fut))
    return {"label": int((await fut).argmax())}

async def main():
    task = asyncio.create_task(batcher())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        for i in range(0, 6, 2):
            rs = await asyncio.gather(*[c.post("/predict", json=[1, 2, 3, 4], headers={"x-request-id": "req-%04d-ab" % j})
                                        for j in (i, i + 1)])
            assert all(r.status_code == 200 for r in rs), rs
    task.cancel()
    for k, v in ENQ.items():
        print("ENQ", k, v)
    core.R.flush()
    print("OK")

asyncio.run(main())
"""


@pytest.mark.process  # the hook runs in a child process
def test_a_sync_dependency_on_a_worker_thread_hands_nothing_over(tmp_path):
    """FastAPI runs a sync dependency (LitServe's ``no_auth``, on every request) on anyio's worker thread: the
    request's context, its function and a future go on that thread's queue — the request's own code going on in a
    thread, not work handed to a batcher. That put was the request's hand-off, the thread's get its take and the
    future its answer, so a LitServe request's batch wait began before it read its body (0.2 ms at 1 client to
    1.1 ms at 16 early, median, against its clock; 20 ms here, where the handler puts its work 20 ms later). The
    hand-off is the put to the batcher; the take and the answer are the batcher's."""
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    enq, reqs, starts, lines = _hooked_handoffs(tmp_path, SYNC_DEPENDENCY)
    for r in reqs:
        handoff, claimed, delivered = int(r[12]), int(r[13]), int(r[14])
        first = min(t for t in starts if t >= enq[r[15]])
        # the hand-off is the put to the batcher, taken by the batcher before the forward, answered after it
        assert enq[r[15]] <= handoff <= claimed <= first <= delivered, (r, enq[r[15]], first)
    assert not [ln for ln in lines if ln[0] == "I" and "hook_error" in ln[2]]


# ------------------------------------------------------------------------------------- the join on rows
def _requests(keys: list[str], handoff: list[int], pid: int = 10, status: list[int] | None = None) -> Table:
    n = len(keys)
    start = np.arange(n, dtype=np.int64) * 1000 + 1000
    return Table({"pid": np.full(n, pid, np.int64), "start_ns": start, "end_ns": start + 900,
                  "status": np.asarray(status if status is not None else [200] * n, np.int64),
                  "queue_ns": np.full(n, -1, np.int64), "forwards": np.zeros(n, np.int64),
                  "handoff_ns": np.asarray(handoff, np.int64), "claimed_ns": np.full(n, -1, np.int64),
                  "delivered_ns": np.full(n, -1, np.int64), "received_ns": np.full(n, -1, np.int64),
                  "gets": np.zeros(n, np.int64), "follow_key": np.asarray(keys, dtype=object)})


def _forwards(rows: list[tuple[int, int, int, str]]) -> Table:
    return Table({"pid": np.asarray([r[0] for r in rows], np.int64), "start_ns": np.asarray([r[1] for r in rows], np.int64),
                  "end_ns": np.asarray([r[2] for r in rows], np.int64), "rows": np.full(len(rows), -1, np.int64),
                  "tokens": np.full(len(rows), -1, np.int64), "tid": np.ones(len(rows), np.int64),
                  "keys": np.asarray([r[3] for r in rows], dtype=object)})


def test_identity_join_ties_requests_to_the_forwards_that_name_them_in_another_process():
    """Two requests in process 10, two forwards in process 20 that overlap both requests' windows: each request
    gets only the forward that named it, and its take time (the consumer's) splits queued from collected."""
    req = _requests(["aaaa-1111-x", "bbbb-2222-y"], [1100, 2100])
    fwd = _forwards([(20, 1500, 1700, "aaaa-1111-x/1200"), (20, 2500, 2700, "bbbb-2222-y/2300")])
    j = join_batches(req, fwd)
    assert j is not None and j.index.tolist() == [0, 1]
    assert j.members.tolist() == [1, 1]
    assert j.parts["wait_ns"].tolist() == [400, 400] and j.parts["queued_ns"].tolist() == [100, 200]
    assert follow_note(req, j.index, fwd) is None


def test_an_engine_step_followed_by_identity_still_counts_what_a_prompt_waited_behind():
    """transformers' continuous batching names its requests on every step, in the process that opened them: a
    prompt that waited while the engine ran another sequence's decode alone (a slot free: the most it ran together
    is 2) waited behind decode — read from the named steps too, not only from steps joined by time."""
    a, b = "aaaa-1111-x", "bbbb-2222-y"
    req = _requests([a, b], [1100, 2100])
    req.columns["end_ns"] = np.asarray([2500, 2900], np.int64)  # a streams on: its steps run until its answer ends
    fwd = _forwards([(10, 1150, 1200, f"{a}/1150"), (10, 2150, 2200, f"{a}/1150"),
                     (10, 2300, 2350, f"{a}/1150,{b}/2250"), (10, 2400, 2450, f"{a}/1150,{b}/2250")])
    j = join_batches(req, fwd)
    assert j is not None and j.index.tolist() == [0, 1] and j.members.tolist() == [1, 1, 2, 2]
    assert j.parts["behind_ns"].tolist() == [0, 50] and j.parts["behind_steps"].tolist() == [0, 1]
    assert j.parts["wait_ns"].tolist() == [50, 200] and j.parts["queued_ns"].tolist() == [50, 150]


def test_requests_that_cannot_be_followed_are_one_sentence_with_count_and_reason():
    """A request whose work carried no id (``?``), one whose id no forward named, and the case with no forward
    recorded anywhere (a worker without the hook): one sentence each time, never silence."""
    req = _requests(["?", "cccc-3333-z", "aaaa-1111-x", ""], [1100, 2100, 3100, -1])
    fwd = _forwards([(20, 3500, 3700, "aaaa-1111-x/3200")])
    j = join_batches(req, fwd)
    note = follow_note(req, j.index, fwd)
    assert note is not None and note.startswith("2 of 3 requests"), note
    assert "no id in it" in note and "1 handed their work" in note
    nothing = follow_note(req, None, Table())
    assert nothing is not None and nothing.startswith("3 of 3 requests") and "without gpusleuth's hook" in nothing


def test_requests_shed_with_an_error_before_any_forward_are_said_as_shed_not_as_lost():
    """BentoML under a Poisson rate its host could not keep up with (load 7 on 2 cores): 71 of 400 requests
    answered 503 — its dispatcher cancels a job that would wait past ``max_latency_ms`` — and the sentence said
    their work "was taken by something that did not hand it to a torch module". Shed, with their status."""
    req = _requests(["aaaa-1111-x", "dddd-4444-w", "eeee-5555-v", "ffff-6666-u"], [1100, 2100, 3100, 4100],
                    status=[200, 503, 503, 200])
    fwd = _forwards([(20, 1500, 1700, "aaaa-1111-x/1200")])
    note = follow_note(req, join_batches(req, fwd).index, fwd)
    assert note is not None and note.startswith("3 of 4 requests"), note
    assert "2 were answered with an error (2×503)" in note and "shed" in note, note
    assert "1 handed their work" in note, note  # the 200 that no forward named is still the follow's loss


def _procs(rows: list[tuple[int, int, float]]) -> Table:
    return Table({"t_ns": np.asarray([r[0] for r in rows], np.int64), "pid": np.asarray([r[1] for r in rows], np.int64),
                  "cpu_pct": np.asarray([r[2] for r in rows], np.float64)})


def test_requests_whose_model_ran_in_a_process_reached_by_a_socket_are_one_sentence():
    """No request ran a forward, none handed its work to anything the hook follows, no forward ran outside a
    request — and the server's other process worked while they ran: the sentence with the count and that process.
    The same requests with the other process idle (a server without a model: health checks) say nothing."""
    req = _requests(["", "", ""], [-1, -1, -1])  # process 10, requests 1000 → 3900 ns
    ticks = [500, 1500, 2500, 3500, 4500]
    busy = Run(meta={}, requests=req, procs=_procs([(t, 10, 5.0) for t in ticks] + [(t, 20, 60.0) for t in ticks]))
    busy.processes[20] = ProcessInfo(pid=20, role="python", torch_version="2.5.0")
    note = elsewhere_note(busy, req)
    assert note is not None and note.startswith("3 of 3 requests ran no model forward"), note
    assert "0.60 cores" in note and "pid 20, torch 2.5.0" in note and "a socket, shared memory" in note
    idle = Run(meta={}, requests=req, procs=_procs([(t, 10, 5.0) for t in ticks] + [(t, 20, 3.0) for t in ticks]))
    assert elsewhere_note(idle, req) is None
    # a server whose requests run their model themselves says nothing, however busy its other processes
    own = _requests(["", "", ""], [-1, -1, -1])
    own["forwards"][:] = 1
    assert elsewhere_note(Run(meta={}, requests=own, procs=busy.procs), own) is None


def _answered(levels: list[tuple[int, int, float, int]]) -> Table:
    """``gpusleuth load``'s rows: (level, concurrency, rate, status) each, 10 ms apart from t=1000 ns."""
    n = len(levels)
    start = np.arange(n, dtype=np.int64) * 10_000_000 + 1000
    return Table({"level": np.asarray([r[0] for r in levels], np.int64),
                  "concurrency": np.asarray([r[1] for r in levels], np.int64),
                  "rate": np.asarray([r[2] for r in levels], np.float64), "start_ns": start, "end_ns": start + 5_000_000,
                  "status": np.asarray([r[3] for r in levels], np.int64)})


def test_a_loaded_server_whose_requests_no_hook_saw_is_one_sentence_with_the_count_per_level():
    """llama.cpp's C++ server (xllamacpp) answers in native threads: the hook records no request at all. The
    sentence counts what the server answered per level (warm-up rows, level -1, and errors left out), names the
    engine its /metrics named, and its processes' CPU; without the engine it gives the general reasons. Nothing is
    said when the hook saw requests, when gpusleuth started no server (``gpusleuth load URL`` alone), or when
    nothing was answered."""
    load = _answered([(-1, 0, 0.0, 200)] + [(0, 1, 0.0, 200)] * 3 + [(1, 16, 0.0, 200)] * 5 + [(1, 16, 0.0, 503)])
    ticks = [t * 10_000_000 for t in range(1, 10)]
    procs = _procs([(t, 7, 80.0) for t in ticks])
    llama = [EngineSample(t_ns=0, engine="llamacpp"), EngineSample(t_ns=ticks[-1], engine="llamacpp")]
    run = Run(meta={"command": ["python", "llama_server.py"]}, load=load, procs=procs, engine=llama)
    note = native_note(run)
    assert note is not None and note.startswith("8 of 8 requests the server answered (concurrency 1: 3, "
                                                "concurrency 16: 5)"), note
    assert "0.80 cores" in note and "llama.cpp's" in note and note.endswith("are not attributed"), note
    general = native_note(Run(meta={"command": ["./server"]}, load=load, procs=procs))
    assert general is not None and "native code such as llama.cpp's" in general, general
    rated = native_note(Run(meta={"command": ["./server"]}, load=_answered([(0, 0, 20.0, 200)] * 4)))
    assert rated is not None and rated.startswith("4 of 4 requests the server answered (20/s: 4)"), rated
    assert native_note(Run(meta={}, load=load, procs=procs, engine=llama)) is None  # no server started
    assert native_note(Run(meta={"command": ["x"]}, load=_answered([(0, 1, 0.0, 503)] * 3))) is None
    seen = Run(meta={"command": ["x"]}, load=load, requests=_requests(["", ""], [-1, -1]))
    assert native_note(seen) is None


@pytest.mark.process
def test_a_model_behind_a_socket_between_processes_is_said_not_silent(tmp_path):
    """A real server (tests/servers/socket_worker.py: http.server, its model in a worker process fed through a
    socketpair) under ``gpusleuth load … -- server``: the report carries the sentence among its losses, with the
    count of the levels' requests — before, nothing at all was said."""
    port = free_port()
    body = tmp_path / "body.json"
    body.write_text('{"input": [1, 2, 3, 4]}')
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}/", "--concurrency", "1,4",
                          "--duration", "1.5", "--body-file", str(body), "--out", str(out), "--json", "--",
                          sys.executable, str(SERVERS / "socket_worker.py"), str(port)], env=_env(), capture_output=True,
                         text=True, timeout=200)
    assert res.returncode == 0, res.stderr[-3000:]
    rep = json.loads(res.stdout)
    sent = sum(lv["requests"] for lv in rep["serving"]["levels"])
    note = rep["request_stages"]["note"]
    assert note is not None and "ran no model forward in the process that served them" in note, note
    count, total = note.split(" requests")[0].split(" of ")
    # every request of the server: the levels' and the readiness probes' (a few, before the warm-up)
    assert int(count.replace(",", "")) == int(total.replace(",", "")), note[:80]
    assert sent <= int(total.replace(",", "")) <= sent + 20, (note[:80], sent)
    assert note in rep["losses"]
    # the Host line: the whole server (the HTTP process and its worker), as analysis summed it
    text = subprocess.run([sys.executable, "-m", "gpusleuth", "report", str(out)], env=_env(), capture_output=True,
                          text=True, timeout=120).stdout
    line = next(x for x in text.splitlines() if "server CPU" in x and "process(es)" in x)
    assert f"{rep['host']['server_cores']:.2f} cores over its 2 process(es)" in line, line


def test_a_servers_cpu_is_every_process_of_it_summed_per_sampling_time():
    """server_cpu: the job's processes summed at each sampling time, averaged over the window's times — a launcher
    at 5 % beside a worker at 90 % and a proxy at 30 % is 1.25 cores over 3 processes (one idle one not counted)."""
    ticks = [100, 200, 300, 400]
    procs = _procs([(t, 1, 5.0) for t in ticks] + [(t, 2, 90.0) for t in ticks] + [(t, 3, 30.0) for t in ticks]
                   + [(t, 4, 0.0) for t in ticks] + [(900, 2, 400.0)])  # the last: outside the window
    got = server_cpu(Run(meta={}, procs=procs), (100, 400))
    assert got is not None and got[0] == pytest.approx(1.25) and got[1] == 3
