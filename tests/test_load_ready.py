"""``gpusleuth load`` waits for a server that says it is not ready (503) before the first level.

llama.cpp's server listens before its model is loaded and answers every route 503 "Loading model" until
then; a load started at its first answer sent its first requests into that (and its engine's baseline
scrape failed). A 503 is polled on until ``--ready-timeout``; one that lasts past it is still an answer, and
the load goes on with its rows saying 503.
"""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
import time

import pyarrow.parquet as pq
import pytest

from test_serving import _env

pytestmark = pytest.mark.process


def _serve(ready_after_s: float):
    start = time.monotonic()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _answer(self):
            if self.command == "POST":
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
            loading = time.monotonic() - start < ready_after_s
            body = b'{"error":{"message":"Loading model","code":503}}' if loading else b"ok"
            self.send_response(503 if loading else 200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _load(server, tmp_path, ready_timeout: str) -> list[dict]:
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "load", url, "--method", "POST", "--concurrency", "1",
                          "--duration", "0.5", "--ready-timeout", ready_timeout, "--out", str(tmp_path / "run")],
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return pq.read_table(tmp_path / "run" / "load.parquet").to_pylist()


def test_a_server_loading_its_model_is_waited_for(tmp_path):
    server = _serve(ready_after_s=1.5)
    try:
        rows = _load(server, tmp_path, "20")
    finally:
        server.shutdown()
        server.server_close()
    assert rows and {r["status"] for r in rows} == {200}  # the old probe took the first 503 as ready


def test_a_server_that_stays_unavailable_is_loaded_after_the_wait(tmp_path):
    server = _serve(ready_after_s=1e9)
    try:
        t0 = time.monotonic()
        rows = _load(server, tmp_path, "1")
    finally:
        server.shutdown()
        server.server_close()
    assert rows and {r["status"] for r in rows} == {503}  # the load went on, its rows say what came back
    assert time.monotonic() - t0 >= 1.0
