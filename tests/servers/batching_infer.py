"""A dynamic-batching inference server for gpusleuth's serving tests:
``python batching_infer.py PORT TRUTH.json [MODE [MAX_BATCH [WAIT_MS [WIDTH]]]]``.

The pattern Triton's dynamic batcher, TorchServe's ``batch_size``/``max_batch_delay`` and vLLM's engine
loop share: the request handler only enqueues its input with a future and waits; a batcher collects queued
inputs until it has ``MAX_BATCH`` (16) of them or ``WAIT_MS`` (10) passed since the first, stacks them and
runs **one** forward of a real torch model (an MLP ``WIDTH`` (1024) wide) on a model thread, then answers
each future with its row.

* mode ``asgi`` (default): FastAPI under uvicorn; an ``asyncio.Queue`` of ``(input, asyncio future)``, a
  batcher task started with the app, the forward on a one-thread executor (``loop.run_in_executor``).
* mode ``threads``: stdlib ``ThreadingHTTPServer``; a ``queue.Queue`` of ``(input,
  concurrent.futures.Future)`` and a model thread that batches and answers them.
* mode ``stream``: continuous batching, as an LLM engine does it: FastAPI handlers put ``(input, token
  queue)`` on a ``queue.Queue`` and stream what their ``asyncio.Queue`` receives; an engine thread runs one
  forward per step over every running sequence (new ones join at the next step), hands each its token, and
  retires a sequence after ``TOKENS`` (8) steps. Its own clock per request: the first step that included
  it (prefill) and the sum of the others (decode).
* mode ``deque``: as ``threads``, but the hand-off is a ``collections.deque`` under a
  ``threading.Condition`` and the answer a ``threading.Event`` — nothing a generic hook can follow.
* mode ``lazy-deque``: BentoML's adaptive batching dispatcher: FastAPI handlers append ``(input, asyncio
  future)`` to a ``collections.deque``; the dispatcher task is created by the **first request**
  (``asyncio.create_task`` inside it, so the task starts with that request's context) and runs the forward
  on the event loop itself, after a ``WAIT_MS`` window, for up to ``MAX_BATCH`` items.

The server times itself with ``time.perf_counter`` and writes TRUTH.json on SIGINT/SIGTERM: per request its
service time (the handler started → the response was sent) and wall-clock start, its batch wait (enqueued → its batch's forward
started), its batch's forward time and size, and the forwards' sizes and wall-clock start times (to split
them by load level).
"""
import asyncio
import json
import queue
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import torch

PORT, TRUTH = int(sys.argv[1]), sys.argv[2]
MODE = sys.argv[3] if len(sys.argv) > 3 else "asgi"
MAX_BATCH = int(sys.argv[4]) if len(sys.argv) > 4 else 16
WAIT_S = (float(sys.argv[5]) if len(sys.argv) > 5 else 10.0) / 1e3
WIDTH = int(sys.argv[6]) if len(sys.argv) > 6 else 1024
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(*[m for _ in range(3) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())],
                            torch.nn.Linear(WIDTH, 8)).eval()
with torch.no_grad():
    model(torch.zeros(MAX_BATCH, WIDTH))  # warm-up, outside any request
ROWS = torch.randn(64, WIDTH)


class Truth:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []  # [service_s, batch_wait_s, forward_s, batch_size, wall-clock start ns, …]
        self.batches = []  # [wall-clock start ns, size, forward_s]

    def request(self, service, wait, fwd, size, t_wall, *more):
        with self.lock:
            self.requests.append([service, wait, fwd, size, t_wall, *more])

    def batch(self, t_ns, size, fwd):
        with self.lock:
            self.batches.append([t_ns, size, fwd])

    def write(self):
        with self.lock, open(TRUTH, "w") as f:
            json.dump({"mode": MODE, "max_batch": MAX_BATCH, "wait_ms": WAIT_S * 1e3, "requests": self.requests,
                       "batches": self.batches}, f)


TRUTH_LOG = Truth()


def row_of(body):
    return ROWS[sum(body[:64]) % len(ROWS)]


def run_batch(items):
    """One forward over the stacked inputs: (outputs, perf_counter start, seconds)."""
    x = torch.stack([it[0] for it in items])
    t_wall, t = time.time_ns(), time.perf_counter()
    with torch.no_grad():
        y = model(x)
    fwd = time.perf_counter() - t
    TRUTH_LOG.batch(t_wall, len(items), fwd)
    return y, t, fwd


def answer(y):
    return json.dumps({"label": int(y.argmax())}).encode()


# ------------------------------------------------------------------------------------------ asgi mode
def asgi_main():
    import uvicorn
    from fastapi import FastAPI, Request, Response

    state = {}

    async def batcher():
        q, pool = state["q"], ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        loop = asyncio.get_running_loop()
        while True:
            items = [await q.get()]
            deadline = loop.time() + WAIT_S
            while len(items) < MAX_BATCH:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    items.append(await asyncio.wait_for(q.get(), left))
                except asyncio.TimeoutError:
                    break
            y, t, fwd = await loop.run_in_executor(pool, run_batch, items)
            for i, (_, fut, enq) in enumerate(items):
                if not fut.done():
                    fut.set_result((y[i], t - enq, fwd, len(items)))

    async def lifespan(app):
        state["q"] = asyncio.Queue()
        state["lazy"] = LazyDispatcher()
        if MODE == "stream":
            state["sq"] = queue.Queue()
            threading.Thread(target=stream_engine, args=(state["sq"], asyncio.get_running_loop()), name="engine",
                             daemon=True).start()
            yield
            return
        task = asyncio.create_task(batcher())
        yield
        task.cancel()

    app = FastAPI(lifespan=lifespan)

    class Timing:
        """The server's own clock of a request: the app's entry → its last body message sent."""

        def __init__(self, inner):
            self.inner = inner

        async def __call__(self, scope, receive, send):
            if scope["type"] != "http":
                return await self.inner(scope, receive, send)
            enter, t_wall = time.perf_counter(), time.time_ns()

            async def timed_send(message):
                await send(message)
                if message["type"] == "http.response.body" and not message.get("more_body") and "batch" in scope:
                    wait, fwd, size, *more = scope["batch"]
                    TRUTH_LOG.request(time.perf_counter() - enter, wait, fwd, size, t_wall, *more)

            await self.inner(scope, receive, timed_send)

    app.add_middleware(Timing)

    @app.get("/")
    async def ready():
        return Response(b"ok")

    async def stream(request: Request):
        from fastapi.responses import StreamingResponse

        body = await request.body()
        tokens = asyncio.Queue()
        state["sq"].put((row_of(body), tokens, time.perf_counter()))

        async def gen():
            while True:
                item = await tokens.get()
                if isinstance(item, tuple):  # the last token, with the engine's own clock of this sequence
                    request.scope["batch"] = item[1]
                    yield item[0]
                    return
                yield item

        return StreamingResponse(gen(), media_type="text/plain")

    @app.post("/")
    async def infer(request: Request):
        if MODE == "stream":
            return await stream(request)
        body = await request.body()
        if MODE == "lazy-deque":
            y, wait, fwd, size = await state["lazy"](row_of(body))
            request.scope["batch"] = (wait, fwd, size)
            return Response(answer(y), media_type="application/json")
        fut = asyncio.get_running_loop().create_future()
        await state["q"].put((row_of(body), fut, time.perf_counter()))
        y, wait, fwd, size = await fut
        request.scope["batch"] = (wait, fwd, size)
        return Response(answer(y), media_type="application/json")

    try:
        uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning", http="h11")
    finally:
        TRUTH_LOG.write()


class LazyDispatcher:
    """Mode ``lazy-deque``: BentoML's pattern (its ``CorkDispatcher``): a deque, and the dispatcher task created
    by the first call, inside that request."""

    def __init__(self):
        import collections

        self.items, self.task, self.wake = collections.deque(), None, None

    async def __call__(self, row):
        if self.task is None:
            self.wake = asyncio.Event()
            self.task = asyncio.create_task(self.dispatch())
        fut = asyncio.get_running_loop().create_future()
        self.items.append((row, fut, time.perf_counter()))
        self.wake.set()
        return await fut

    async def dispatch(self):
        while True:
            if not self.items:
                self.wake.clear()
                await self.wake.wait()
            await asyncio.sleep(WAIT_S)  # the window: more requests join the batch
            items = [self.items.popleft() for _ in range(min(MAX_BATCH, len(self.items)))]
            y, t, fwd = run_batch(items)  # on the event loop, in this task, as BentoML's dispatcher awaits it
            for i, (_, fut, enq) in enumerate(items):
                if not fut.done():
                    fut.set_result((y[i], t - enq, fwd, len(items)))


TOKENS = 8


def stream_engine(q, loop):
    """Mode ``stream``: one forward per step over every running sequence; a token to each per step."""
    running = []  # [input row, token queue, enqueued, steps, first step start, prefill s, decode s]
    while True:
        if not running:
            row, tokens, enq = q.get()
            running.append([row, tokens, enq, 0, 0.0, 0.0, 0.0])
        while True:
            try:
                row, tokens, enq = q.get_nowait()
            except queue.Empty:
                break
            running.append([row, tokens, enq, 0, 0.0, 0.0, 0.0])
        y, t, fwd = run_batch([(seq[0],) for seq in running])
        for i, seq in enumerate(running):
            if seq[3] == 0:
                seq[4], seq[5] = t, fwd
            else:
                seq[6] += fwd
            seq[3] += 1
            token = f"{int(y[i].argmax())} ".encode()
            if seq[3] < TOKENS:
                loop.call_soon_threadsafe(seq[1].put_nowait, token)
            else:  # the last token carries the engine's own clock of the sequence, as a finished output does:
                # wait (enqueued → its first step), its forwards, steps, then prefill and decode apart
                loop.call_soon_threadsafe(seq[1].put_nowait, (token, (seq[4] - seq[2], seq[5] + seq[6], seq[3],
                                                                     seq[5], seq[6])))
        running = [s for s in running if s[3] < TOKENS]


# --------------------------------------------------------------------------------------- threads mode
class DequeQueue:
    """Mode ``deque``: a hand-off of the server's own making (a deque under a condition)."""

    def __init__(self):
        import collections

        self.items, self.cond = collections.deque(), threading.Condition()

    def put(self, item):
        with self.cond:
            self.items.append(item)
            self.cond.notify()

    def get(self, timeout=None):
        with self.cond:
            if not self.cond.wait_for(lambda: self.items, timeout):
                raise queue.Empty
            return self.items.popleft()


class EventResult:
    """Mode ``deque``: the answer handed back through an event, not a future."""

    def __init__(self):
        self.event, self.value = threading.Event(), None

    def set_result(self, value):
        self.value = value
        self.event.set()

    def result(self):
        self.event.wait()
        return self.value


def threads_main():
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from infer_common import serve_until_stopped

    q = queue.Queue() if MODE == "threads" else DequeQueue()

    def model_thread():
        while True:
            items = [q.get()]
            deadline = time.monotonic() + WAIT_S
            while len(items) < MAX_BATCH:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    items.append(q.get(timeout=left))
                except queue.Empty:
                    break
            y, t, fwd = run_batch(items)
            for i, (_, fut, enq) in enumerate(items):
                fut.set_result((y[i], t - enq, fwd, len(items)))

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *args):
            pass

        def do_POST(self):
            t0, t_wall = time.perf_counter(), time.time_ns()
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            fut = Future() if MODE == "threads" else EventResult()
            q.put((row_of(body), fut, time.perf_counter()))
            y, wait, fwd, size = fut.result()
            out = answer(y)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            TRUTH_LOG.request(time.perf_counter() - t0, wait, fwd, size, t_wall)

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    threading.Thread(target=model_thread, name="model", daemon=True).start()
    server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
    server.daemon_threads = True
    serve_until_stopped(server, TRUTH_LOG)


if __name__ == "__main__":
    asgi_main() if MODE in ("asgi", "stream", "lazy-deque") else threads_main()
