"""A stdlib inference server for gpusleuth's serving tests: ``python http_infer.py PORT TRUTH.json [MODE [AFTER_S]]``.

``ThreadingHTTPServer`` (HTTP/1.1 keep-alive) with a small torch model on CPU. ``POST /`` with a text body:

* mode ``tokenize`` (default): pure-Python tokenization of the body in the request path, one forward, JSON;
* mode ``plain``: no preprocessing — the body is ignored, a fixed input goes through a heavier model;
* mode ``lock``: like ``plain``, with a lock around the forward: concurrent requests wait for one another
  inside the handler, before the model (nothing is preprocessed);
* mode ``queue``: like ``plain``, but one worker thread serves the accepted connections one after the
  other (requests wait in the server's own queue before a worker takes them).

An optional fourth argument AFTER_S: seconds the handler keeps working after its response is written (an
access-log line sent somewhere slow) — the client has its answer, so it is not the request's time.

``GET /`` answers ``ok`` without a model call (the readiness probe). The server's own timings (pre = header
parsing, body read and tokenization, infer = the forward, post = encode + write) go to TRUTH.json when it is stopped.
"""
import contextlib
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from infer_common import Truth, answer, build_model, model_input, serve_until_stopped

PORT, TRUTH = int(sys.argv[1]), Truth(sys.argv[2])
MODE = sys.argv[3] if len(sys.argv) > 3 else "tokenize"
AFTER_S = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0  # work after the response (a slow access log)
model = build_model(MODE)
MODEL_LOCK = threading.Lock() if MODE == "lock" else contextlib.nullcontext()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

    def log_message(self, *args):
        pass

    def parse_request(self):
        # The request starts where its headers are parsed (before do_POST): that parsing is the server's time too,
        # and under load it is where a thread waits for the GIL (up to 10 points of a 5 ms request on CI's host).
        self.t_start = time.perf_counter()
        return super().parse_request()

    def do_POST(self):
        t0 = self.t_start
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        x, tok_s = model_input(MODE, body)
        with MODEL_LOCK:  # mode lock: one request at a time in the model; the wait counts in pre
            t1 = time.perf_counter()
            with torch.no_grad():
                y = model(x)
            t2 = time.perf_counter()
        out = answer(y, x)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
        self.wfile.flush()
        TRUTH.add(t0, t1, t2, time.perf_counter(), tok_s)
        if AFTER_S:
            time.sleep(AFTER_S)

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


class PoolServer(ThreadingHTTPServer):
    """Accepted connections wait for one worker thread: the server's own request queue."""

    pool = ThreadPoolExecutor(max_workers=1)

    def process_request(self, request, client_address):
        self.pool.submit(self.process_request_thread, request, client_address)


def main():
    server = (PoolServer if MODE == "queue" else ThreadingHTTPServer)(("127.0.0.1", PORT), Handler)
    server.daemon_threads = True
    serve_until_stopped(server, TRUTH)


if __name__ == "__main__":
    main()
