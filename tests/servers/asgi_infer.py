"""A FastAPI (uvicorn) inference server for gpusleuth's serving tests: ``python asgi_infer.py PORT TRUTH.json``.

An ``async`` endpoint that tokenizes in the request path and runs one forward on the event loop — the
common, GIL-bound way of writing one. Its own timings go to TRUTH.json when uvicorn has shut down: an ASGI
middleware of its own clocks the request from the app's entry (pre starts there) to its last body message
sent (post ends there: with the loop busy elsewhere, sending the answer waits too).
"""
import sys
import time

import torch
import uvicorn
from fastapi import FastAPI, Request, Response
from infer_common import Truth, answer, build_model, model_input

PORT, TRUTH = int(sys.argv[1]), Truth(sys.argv[2])
model = build_model("tokenize")
app = FastAPI()


class Timing:
    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.inner(scope, receive, send)
        enter = time.perf_counter()

        async def timed_send(message):
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body") and "t_fwd" in scope:
                _, t1, t2, tok_s = scope["t_fwd"]
                TRUTH.add(enter, t1, t2, time.perf_counter(), tok_s)

        await self.inner(scope, receive, timed_send)


app.add_middleware(Timing)


@app.get("/")
async def ready():
    return Response(b"ok")


@app.post("/")
async def infer(request: Request):
    t0 = time.perf_counter()
    body = await request.body()
    x, tok_s = model_input("tokenize", body)
    t1 = time.perf_counter()
    with torch.no_grad():
        y = model(x)
    t2 = time.perf_counter()
    request.scope["t_fwd"] = (t0, t1, t2, tok_s)
    return Response(answer(y, x), media_type="application/json")


if __name__ == "__main__":
    try:
        uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning", http="h11")
    finally:
        TRUTH.write()
