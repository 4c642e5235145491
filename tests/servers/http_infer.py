"""A stdlib inference server for gpusleuth's serving tests: ``python http_infer.py PORT TRUTH.json [MODE]``.

``ThreadingHTTPServer`` (HTTP/1.1 keep-alive) with a small torch model on CPU. ``POST /`` with a text body:

* mode ``tokenize`` (default): pure-Python word-piece-ish tokenization of the body in the request path
  (sized to take most of the request), then one forward, then a JSON answer;
* mode ``plain``: no preprocessing — the body is ignored, a fixed input goes through a heavier model;
* mode ``queue``: like ``plain``, but a pool of 1 worker thread serves the accepted connections (requests
  wait in the server's own queue before a worker takes them).

The server times its own stages with ``time.perf_counter`` (pre = body read + tokenization, infer = the
forward, post = encode + write the response) and writes their sums to TRUTH.json on SIGINT/SIGTERM: the
ground truth the hook's split is checked against. It knows nothing about gpusleuth, except that it names its
tokenization with ``gpusleuth.stage`` when gpusleuth is importable.
"""
import json
import re
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

try:
    from gpusleuth import stage
except ImportError:  # pragma: no cover - the server runs without gpusleuth too
    import contextlib

    def stage(name):
        return contextlib.nullcontext()

torch.set_num_threads(1)
PORT, TRUTH = int(sys.argv[1]), sys.argv[2]
MODE = sys.argv[3] if len(sys.argv) > 3 else "tokenize"
VOCAB = 4096
WORD = re.compile(r"[a-z]+|[0-9]+|[^\sa-z0-9]")

torch.manual_seed(0)
if MODE == "tokenize":
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 32), torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 32))
else:
    model = torch.nn.Sequential(*[m for _ in range(3) for m in (torch.nn.Linear(1024, 1024), torch.nn.ReLU())],
                                torch.nn.Linear(1024, 8))
model.eval()
FIXED = torch.randn(8, 1024)

LOCK = threading.Lock()
TRUTH_SUMS = {"requests": 0, "pre_s": 0.0, "infer_s": 0.0, "post_s": 0.0, "tokenize_s": 0.0,
              "forward_s": []}


def tokenize(text):
    """Lower-case, split into words, then greedy word pieces of at most 4 characters hashed into the
    vocabulary: deliberately slow pure Python, like a tokenizer without a fast backend."""
    ids = []
    for word in WORD.findall(text.lower()):
        i = 0
        while i < len(word):
            piece = word[i:i + 4]
            h = 0
            for ch in piece:
                h = (h * 131 + ord(ch)) % VOCAB
            ids.append(h)
            i += 4
    return ids


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        t0 = time.perf_counter()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if MODE == "tokenize":
            with stage("tokenize"):
                t_tok = time.perf_counter()
                ids = tokenize(body.decode("utf-8", "replace"))
                tok_s = time.perf_counter() - t_tok
            x = torch.tensor(ids or [0]).unsqueeze(0)
        else:
            tok_s = 0.0
            x = FIXED
        t1 = time.perf_counter()
        with torch.no_grad():
            y = model(x)
        t2 = time.perf_counter()
        out = json.dumps({"label": int(y.reshape(-1, y.shape[-1]).mean(0).argmax()), "tokens": int(x.numel())}
                         ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
        self.wfile.flush()
        t3 = time.perf_counter()
        with LOCK:
            TRUTH_SUMS["requests"] += 1
            TRUTH_SUMS["pre_s"] += t1 - t0
            TRUTH_SUMS["infer_s"] += t2 - t1
            TRUTH_SUMS["post_s"] += t3 - t2
            TRUTH_SUMS["tokenize_s"] += tok_s
            TRUTH_SUMS["forward_s"].append(t2 - t1)

    def do_GET(self):  # readiness probe: no model call
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
    cls = PoolServer if MODE == "queue" else ThreadingHTTPServer
    server = cls(("127.0.0.1", PORT), Handler)
    server.daemon_threads = True

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)  # also when started with SIGINT ignored (a shell's background job)
    try:
        server.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        with LOCK:
            with open(TRUTH, "w") as f:
                json.dump(TRUTH_SUMS, f)
        server.server_close()


if __name__ == "__main__":
    main()
