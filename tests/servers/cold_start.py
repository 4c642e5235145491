"""A server that is slow until it has served once, for ``gpusleuth load``'s warm-up test:
``python cold_start.py PORT COLD_S``.

Stdlib ``ThreadingHTTPServer``. ``POST /``: the first request pays a lazy start of ``COLD_S`` seconds (a model
loaded or compiled on first use, an engine's batch manager started by its first batch) under a lock, so every
request that arrives meanwhile waits for it too; after that each request takes 5 ms. ``GET /`` answers ``ok`` at
once (the readiness probe: the server is up before it is warm).
"""
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, COLD_S = int(sys.argv[1]), float(sys.argv[2])
STARTED = threading.Lock()
WARM = threading.Event()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not WARM.is_set():
            with STARTED:
                if not WARM.is_set():
                    time.sleep(COLD_S)
                    WARM.set()
        time.sleep(0.005)
        self._send(b'{"ok": true}')

    def do_GET(self):
        self._send(b"ok")


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
    server.daemon_threads = True
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
