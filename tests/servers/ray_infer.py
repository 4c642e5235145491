"""A Ray Serve deployment with ``@serve.batch(max_batch_size=MAX_BATCH)`` on a tiny CPU torch model, in its own
replica actor behind Ray's proxy, and its own clock (issue 32):
``python ray_infer.py PORT TRUTH.json [MAX_BATCH [WAIT_MS [plain|fastapi]]]``.

``fastapi``: the same deployment behind a FastAPI ingress (``@serve.ingress(app)``, the route ``POST /predict``):
the replica runs FastAPI's app inside Ray's call, and the handler is FastAPI's route.

The truth is the replica's, with Ray's own request ids: per request, the span of the replica's call (``start``:
its ``Replica._wrap_request`` entered, before the replica reads the body from the proxy; ``end``: left, after the
answer's last message was handed back to the proxy), the handler's own start and end inside it
(``handler_start``, ``handler_end``) and when it was enqueued for a batch; per batch, its forward (start, end) and
the request ids Ray put in it. The replica appends lines to TRUTH.json.replica as they happen; the driver merges
them into TRUTH.json at exit.

Why the call's span and not the handler's: a request's service time is the server's, from its replica taking the
request to its answer handed back (docs/serving.md, "Per-request stages"), and that is what a share of it
divides by. Before the handler runs, the replica hands the call to its user-code thread's event loop and the
handler's ``request.body()`` fetches the body from the proxy (an actor call); after it, the answer's messages
come back to the replica's own loop: 2.7 ms of an 18 ms request at 1 client, 15 ms of 47 at 16 (load 5 on 2
shared cores). A wait share divided by the handler's span alone read 8-17 points above one divided by the
call's, over the same waits.
"""

import contextlib
import json
import os
import signal
import sys
import time

import ray
import torch
from ray import serve
from fastapi import FastAPI
from starlette.requests import Request

PORT, TRUTH = int(sys.argv[1]), sys.argv[2]
MAX_BATCH = int(sys.argv[3]) if len(sys.argv) > 3 else 8
WAIT_S = float(sys.argv[4]) / 1e3 if len(sys.argv) > 4 else 0.01
MODE = sys.argv[5] if len(sys.argv) > 5 else "plain"
_now = time.time_ns
_CALLS = {}  # Ray's request id -> its replica call's record, while the call is open (read by the handler's thread)


def _time_replica_calls(path):
    """Wrap ``Replica._wrap_request`` (the span gpusleuth's hook opens a request for) in the replica's process:
    each call's start and end, written with what its handler filled in."""
    from ray.serve._private.replica import Replica

    real = Replica._wrap_request
    if getattr(real, "_truth", False):
        return

    @contextlib.contextmanager
    def _wrap_request(self, request_metadata, *args, **kwargs):
        rid = getattr(request_metadata, "request_id", None)
        rec = {"start": _now(), "rid": rid, "enqueued": -1, "handler_start": -1, "handler_end": -1}
        if rid:
            _CALLS[rid] = rec
        try:
            with real(self, request_metadata, *args, **kwargs) as cb:
                yield cb
        finally:
            rec["end"] = _now()
            _CALLS.pop(rid, None)
            if rec["handler_start"] >= 0:  # a call that reached the handler (not a health check)
                with open(path, "a") as f:
                    f.write(json.dumps({"request": rec}) + "\n")

    _wrap_request._truth = True
    Replica._wrap_request = _wrap_request


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                        torch.nn.ReLU(), torch.nn.Linear(256, 10))

    def forward(self, x):
        for _ in range(4):
            y = self.body(x)
        return y


class Infer:
    def __init__(self, truth):
        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.model = Net().eval()
        self.truth = truth
        _time_replica_calls(truth)

    def _line(self, rec):
        with open(self.truth, "a") as f:
            f.write(json.dumps(rec) + "\n")

    @serve.batch(max_batch_size=MAX_BATCH, batch_wait_timeout_s=WAIT_S)
    async def infer(self, items):
        t0 = _now()
        x = torch.stack([x for _, x in items])
        with torch.no_grad():
            y = self.model(x)
        self._line({"batch": {"start": t0, "end": _now(), "size": len(items), "rids": [rid for rid, _ in items]}})
        return [int(v.argmax()) for v in y]

    async def handle(self, request: Request):
        t0 = _now()
        body = await request.body()
        rid = serve.context._get_serve_request_context().request_id
        x = torch.full((64,), float(len(body) % 7))
        t_enq = _now()
        label = await self.infer((rid, x))
        rec = _CALLS.get(rid)
        if rec is not None:  # written when the replica's call ends
            rec["handler_start"], rec["handler_end"], rec["enqueued"] = t0, _now(), t_enq
        return {"label": label}


@serve.deployment(max_ongoing_requests=64, ray_actor_options={"num_cpus": 0})
class Plain(Infer):
    async def __call__(self, request: Request):
        return await self.handle(request)


app = FastAPI()


@serve.deployment(max_ongoing_requests=64, ray_actor_options={"num_cpus": 0})
@serve.ingress(app)
class Ingress(Infer):
    @app.post("/predict")
    async def predict(self, request: Request):
        return await self.handle(request)


def _merge():
    out = {"max_batch": MAX_BATCH, "wait_ms": WAIT_S * 1e3, "requests": [], "batches": []}
    try:
        with open(TRUTH + ".replica") as f:
            for line in f:
                rec = json.loads(line)
                if "batch" in rec:
                    out["batches"].append(rec["batch"])
                else:
                    out["requests"].append(rec["request"])
    except OSError:
        pass
    with open(TRUTH, "w") as f:
        json.dump(out, f)


def _stop(*_):
    raise KeyboardInterrupt


if __name__ == "__main__":
    if os.path.exists(TRUTH + ".replica"):
        os.remove(TRUTH + ".replica")
    signal.signal(signal.SIGTERM, _stop)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": PORT})
    serve.run((Ingress if MODE == "fastapi" else Plain).bind(TRUTH + ".replica"), route_prefix="/")
    try:
        while True:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        try:
            serve.shutdown()
            ray.shutdown()
        finally:
            _merge()
