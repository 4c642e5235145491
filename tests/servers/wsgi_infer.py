"""A WSGI inference server (``wsgiref``) for gpusleuth's serving tests: ``python wsgi_infer.py PORT TRUTH.json``.

A plain WSGI app — tokenization in the request path, one forward — served by a threading
``wsgiref.simple_server``; the response is done when the server closes its iterable. Its own timings go to TRUTH.json when it is stopped (see infer_common).
"""
import socketserver
import sys
import time
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import torch
from infer_common import Truth, answer, build_model, model_input, serve_until_stopped

PORT, TRUTH = int(sys.argv[1]), Truth(sys.argv[2])
model = build_model("tokenize")


def app(environ, start_response):
    if environ["REQUEST_METHOD"] != "POST":
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]
    t0 = time.perf_counter()
    body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    x, tok_s = model_input("tokenize", body)
    t1 = time.perf_counter()
    with torch.no_grad():
        y = model(x)
    t2 = time.perf_counter()
    out = answer(y, x)
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(out)))])
    return Answer(out, (t0, t1, t2, tok_s))


class Answer:
    """The response body; the server calls ``close()`` once it is written (PEP 3333): post ends there."""

    def __init__(self, out, times):
        self.out, self.times = out, times

    def __iter__(self):
        return iter([self.out])

    def close(self):
        t0, t1, t2, tok_s = self.times
        TRUTH.add(t0, t1, t2, time.perf_counter(), tok_s)


class ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def main():
    server = make_server("127.0.0.1", PORT, app, server_class=ThreadingWSGIServer, handler_class=QuietHandler)
    serve_until_stopped(server, TRUTH)


if __name__ == "__main__":
    main()
