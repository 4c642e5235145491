"""``transformers serve --continuous-batching`` with the engine's own clock written down (issue 32):
``python transformers_cb.py TRUTH.jsonl -- SERVE-ARGS…`` runs the ``transformers`` CLI in this process
(``transformers serve SERVE-ARGS…``, unchanged) and appends to TRUTH.jsonl, as they happen:

* per request, when its response has been sent: ``{"rid", "start", "end", "created", "scheduled"}`` — its
  ``X-Request-Id``, the server's start and end of it (an ASGI wrapper around transformers' own app:
  wall-clock ns), and the continuous-batching manager's own stamps of its ``RequestState`` (``created_time``:
  ``add_request`` made it and put it on the manager's input queue; ``lifespan[0]``: the scheduler took it out of
  PENDING into a batch), converted from ``perf_counter`` to wall-clock ns;
* per generation step of the manager's thread: ``{"step": start, "end", "size", "rids"}`` — the requests the
  engine put in that forward (``num_request_in_batch`` and their ids).

Nothing here times anything the engine does not stamp itself, except the step's edges and the request's
service at the ASGI boundary (where the hook's own request starts and ends too).
"""

import json
import sys
import threading
import time

TRUTH = sys.argv[1]
ARGS = sys.argv[sys.argv.index("--") + 1:]
_LOCK = threading.Lock()
_OFFSET = time.time_ns() - time.perf_counter_ns()  # perf_counter (the engine's clock) → wall-clock ns
_STATES = {}  # request id → the engine's RequestState, until its response is sent


def _line(rec):
    with _LOCK, open(TRUTH, "a") as f:
        f.write(json.dumps(rec) + "\n")


def _wall(perf_s):
    return int(perf_s * 1e9) + _OFFSET if perf_s and perf_s > 0 else -1


def _patch_engine():
    from transformers.generation.continuous_batching import continuous_api, requests

    real_post = requests.RequestState.__post_init__

    def post_init(self):
        real_post(self)
        if isinstance(self.request_id, str):
            _STATES[self.request_id] = self

    requests.RequestState.__post_init__ = post_init
    real_step = continuous_api.ContinuousBatchProcessor._generation_step

    def step(self, model):
        t0 = time.time_ns()
        try:
            return real_step(self, model)
        finally:
            io = self.inputs_and_outputs
            rids = [fs.state.request_id for fs in io.requests_in_batch]
            _line({"step": t0, "end": time.time_ns(), "size": int(io.num_request_in_batch), "rids": rids})

    continuous_api.ContinuousBatchProcessor._generation_step = step


def _patch_app():
    from transformers.cli.serving import server

    real_build = server.build_server

    def build_server(*args, **kwargs):
        app = real_build(*args, **kwargs)

        async def timed(scope, receive, send):
            if scope.get("type") != "http":
                return await app(scope, receive, send)
            start = time.time_ns()
            rid = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")

            async def send_timed(message):
                await send(message)
                if message.get("type") == "http.response.body" and not message.get("more_body", False):
                    st = _STATES.pop(rid, None)
                    _line({"rid": rid, "start": start, "end": time.time_ns(),
                           "created": _wall(st.created_time) if st is not None else -1,
                           "scheduled": _wall(st.lifespan[0]) if st is not None else -1})

            return await app(scope, receive, send_timed)

        return timed

    server.build_server = build_server  # Serve imports it from the module when it starts


if __name__ == "__main__":
    _patch_engine()
    _patch_app()
    from transformers.cli.transformers import main

    sys.argv = ["transformers", "serve", *ARGS]
    sys.exit(main())
