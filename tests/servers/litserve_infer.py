"""A LitServe server with its model in LitServe's own spawned inference worker, batching up to MAX_BATCH within
WAIT_MS, and its own clock (issue 32): ``python litserve_infer.py PORT TRUTH.json [MAX_BATCH [WAIT_MS]]``.

The truth is the server's, taken with LitServe's own ids: in the API process each request's service — the span of
its ASGI application (``start``: LitServe's FastAPI app called with the request; ``end``: the response's last body
message sent) —, its handler's start and end inside it (``RegularRequestHandler.handle_request``:
``handler_start``, ``handler_end``), the moment it was submitted to the worker and its uid; in the worker each
batch's forward (start, end) and the uids LitServe collated into it. Lines go to TRUTH.json.api /
TRUTH.json.worker as they happen (the worker is terminated, not asked) and are merged into TRUTH.json by the API
process at exit.

Why the application's span and not the handler's: a request's service time is the server's, from its app taking
the request to its answer sent (docs/serving.md, "Per-request stages"), and that is what a share of it divides
by. Before LitServe's handler runs, Starlette routes the request and FastAPI runs its sync auth dependency
(``no_auth``) on anyio's worker thread; after it, FastAPI builds the JSON response and sends it: 0.7 ms of a
12 ms request at 1 client (0.4 ms before the handler, 0.25 after), 2.6 ms of 24 at 16 (load 1.5-1.7 on 2 shared cores). A wait
share divided by the handler's span alone read 3-9 points above one divided by the application's, over the same
waits (0.878/0.695/0.263 against 0.819/0.605/0.234 at 1/4/16 clients).
"""

import atexit
import json
import os
import sys
import threading
import time

import litserve as ls
import litserve.loops.base as ls_base
import litserve.loops.simple_loops as ls_loops
import litserve.server as ls_server
import torch
from starlette.applications import Starlette

from asgi_clock import timed_app

PORT, TRUTH = int(sys.argv[1]), sys.argv[2]
MAX_BATCH = int(sys.argv[3]) if len(sys.argv) > 3 else 8
WAIT_S = float(sys.argv[4]) / 1e3 if len(sys.argv) > 4 else 0.01
_now = time.time_ns
_LOCK = threading.Lock()
_BATCH = []  # the uids of the batch the worker collated last


def _line(suffix, rec):
    with _LOCK, open(TRUTH + suffix, "a") as f:
        f.write(json.dumps(rec) + "\n")


# ---- the worker's clock: which uids LitServe put in each batch, and that batch's forward



def _collate(self, *args, **kwargs):
    batches, timed_out = ls_base.collate_requests(self, *args, **kwargs)
    _BATCH[:] = [uid for _, uid, _ in batches]
    return batches, timed_out


ls_base.LitLoop.get_batch_requests = _collate


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                        torch.nn.ReLU(), torch.nn.Linear(256, 10))

    def forward(self, x):
        for _ in range(4):  # a few ms on a CPU core: the forward is worth batching
            y = self.body(x)
        return y


class API(ls.LitAPI):
    def setup(self, device):
        torch.set_num_threads(1)
        torch.manual_seed(0)
        self.model = Net().eval()

    def decode_request(self, request):
        return torch.full((64,), float(len(json.dumps(request)) % 7))

    def batch(self, inputs):
        return torch.stack(inputs)

    def predict(self, x):
        t0 = _now()
        with torch.no_grad():
            y = self.model(x)
        _line(".worker", {"start": t0, "end": _now(), "size": int(x.shape[0]), "uids": list(_BATCH)})
        return y

    def unbatch(self, y):
        return list(y)

    def encode_response(self, y):
        return {"label": int(y.argmax())}


# ---- the API process's clock: each request's service (its app's span, its handler's inside it) and its
# submission to the worker, with its uid
_real_app = Starlette.__call__
_real_handle = ls_server.RegularRequestHandler.handle_request
_real_submit = ls_server.BaseRequestHandler._submit_request


_app, _REC = timed_app(_real_app, lambda: {"submit": -1, "uid": None, "rid": None, "handler_start": -1, "handler_end": -1},
                      lambda rec: rec["handler_start"] >= 0,  # reached the API (not a health check)
                      lambda rec: _line(".api", rec))


async def _submit(self, payload):
    t = _now()
    uid, qid = await _real_submit(self, payload)
    rec = _REC.get()
    if rec is not None:
        rec["uid"], rec["submit"] = uid, t
    return uid, qid


async def _handle(self, request, request_type):
    rec = _REC.get()
    if rec is None:
        return await _real_handle(self, request, request_type)
    rec["handler_start"] = _now()
    rec["rid"] = request.headers.get("x-request-id") if hasattr(request, "headers") else None
    try:
        return await _real_handle(self, request, request_type)
    finally:
        rec["handler_end"] = _now()


Starlette.__call__ = _app
ls_server.BaseRequestHandler._submit_request = _submit
ls_server.RegularRequestHandler.handle_request = _handle


def _merge():
    out = {"max_batch": MAX_BATCH, "wait_ms": WAIT_S * 1e3, "requests": [], "batches": []}
    for suffix, key in ((".api", "requests"), (".worker", "batches")):
        try:
            with open(TRUTH + suffix) as f:
                out[key] = [json.loads(line) for line in f if line.strip()]
        except OSError:
            pass
    with open(TRUTH, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    for suffix in (".api", ".worker"):
        if os.path.exists(TRUTH + suffix):
            os.remove(TRUTH + suffix)
    atexit.register(_merge)
    server = ls.LitServer(API(), max_batch_size=MAX_BATCH, batch_timeout=WAIT_S, accelerator="cpu", workers_per_device=1,
                          api_path="/predict")
    try:
        server.run(port=PORT, generate_client_file=False)
    finally:
        _merge()
