"""A LitServe server with its model in LitServe's own spawned inference worker, batching up to MAX_BATCH within
WAIT_MS, and its own clock (issue 32): ``python litserve_infer.py PORT TRUTH.json [MAX_BATCH [WAIT_MS]]``.

The truth is the server's, taken with LitServe's own ids: in the API process each request's service (its
handler's start → end), the moment it was submitted to the worker and its uid; in the worker each batch's
forward (start, end) and the uids LitServe collated into it. Lines go to TRUTH.json.api / TRUTH.json.worker as
they happen (the worker is terminated, not asked) and are merged into TRUTH.json by the API process at exit.
"""

import atexit
import contextvars
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


# ---- the API process's clock: each request's service and its submission to the worker, with its uid
_real_handle = ls_server.RegularRequestHandler.handle_request
_real_submit = ls_server.BaseRequestHandler._submit_request
_SUBMIT = contextvars.ContextVar("truth_submit", default=None)


async def _submit(self, payload):
    t = _now()
    uid, qid = await _real_submit(self, payload)
    rec = _SUBMIT.get()
    if rec is not None:
        rec["uid"], rec["submit"] = uid, t
    return uid, qid


async def _handle(self, request, request_type):
    rec = {"start": _now(), "submit": -1, "uid": None}
    _SUBMIT.set(rec)
    try:
        return await _real_handle(self, request, request_type)
    finally:
        rec["end"] = _now()
        rec["rid"] = request.headers.get("x-request-id") if hasattr(request, "headers") else None
        _line(".api", rec)


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
