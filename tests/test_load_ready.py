"""``gpusleuth load`` waits for a server that says it is not ready (503) before the first level.

llama.cpp's server listens before its model is loaded and answers every route 503 "Loading model" until
then; a load started at its first answer sent its first requests into that (and its engine's baseline
scrape failed). A 503 is polled on until ``--ready-timeout``; one that lasts past it is still an answer, and
the load goes on with its rows saying 503.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from test_serving import _env

pytestmark = pytest.mark.process


def _serve(ready_after_s: float, not_yet: int = 503, get_on_route: int = 200):
    """A server that answers ``not_yet`` on every route for ``ready_after_s``, then 200 (a GET on its route:
    ``get_on_route`` — llama.cpp's server answers GET 404 on its POST routes)."""
    start = time.monotonic()
    seen: dict[str, float] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _answer(self):
            if self.command == "POST":
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
            now = time.monotonic()
            loading = now - start < ready_after_s
            seen.setdefault("first", now)  # the server's own clock of the wait the client reports
            if not loading:
                seen.setdefault("ready", now)
            body = b'{"error":{"message":"Loading model","code":503}}' if loading else b"ok"
            status = not_yet if loading else get_on_route if self.command == "GET" else 200
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.seen = seen  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _load(server, tmp_path, ready_timeout: str, said: list | None = None) -> list[dict]:
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "load", url, "--method", "POST", "--concurrency", "1",
                          "--duration", "0.5", "--ready-timeout", ready_timeout, "--out", str(tmp_path / "run")],
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    if said is not None:
        said.append(res.stderr + res.stdout)
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


def test_a_proxy_answering_404_until_its_app_is_deployed_is_waited_for_and_said(tmp_path):
    """Issue 32 item 7: Ray Serve's proxy answers 404 until the application is deployed, and a 404 counted as ready:
    the first level got 163 404s. 404 (and 502, 503, 504) are now waited through until the route answers, and the
    wait is said with what came back meanwhile."""
    server = _serve(ready_after_s=1.5, not_yet=404)
    said: list = []
    try:
        rows = _load(server, tmp_path, "20", said)
    finally:
        server.shutdown()
        server.server_close()
    assert rows and {r["status"] for r in rows} == {200}
    line = next(x for x in said[0].splitlines() if "to answer from its route" in x)
    assert line.split("answered 404 ×")[1].split(" ")[0].replace(",", "").isdigit(), line
    # the wait said is the one the server saw, from the first probe to the first answer from the route (the
    # client starts 0.3-1 s after the server, its imports' time on a busy host: not a fixed 1.5 s)
    waited = float(line.split("waited ")[1].split(" s")[0])
    truth = server.seen["ready"] - server.seen["first"]
    assert abs(waited - truth) <= 0.3, (waited, truth, line)


def test_a_route_that_answers_get_404_but_takes_the_loads_method_is_ready_at_once(tmp_path):
    """llama.cpp's server answers GET 404 on its POST routes: the probe asks again with the load's own method, so
    the route is ready at once, with no wait to say."""
    server = _serve(ready_after_s=0, get_on_route=404)
    said: list = []
    try:
        t0 = time.monotonic()
        rows = _load(server, tmp_path, "20", said)
    finally:
        server.shutdown()
        server.server_close()
    assert rows and {r["status"] for r in rows} == {200}
    assert time.monotonic() - t0 < 15 and "to answer from its route" not in said[0]


def test_a_url_that_only_answers_404_is_loaded_after_the_wait_and_said(tmp_path):
    server = _serve(ready_after_s=1e9, not_yet=404)
    said: list = []
    try:
        rows = _load(server, tmp_path, "1", said)
    finally:
        server.shutdown()
        server.server_close()
    assert rows and {r["status"] for r in rows} == {404}
    assert "answered only 404 ×" in said[0] and "loaded all the same" in said[0], said[0][-2000:]


def test_a_cold_server_is_warmed_up_before_the_first_level_and_the_warm_up_said_apart(tmp_path):
    """Issue 32 item 7: a cold server's start (``transformers serve --continuous-batching``: no token for 10 s for
    the first four requests) was measured as the first level's latency. By default a few requests go first, together,
    and are reported apart from every level; ``--no-warmup`` meets the server cold, as before."""
    from conftest import free_port

    def load(*more: str) -> tuple[list[dict], dict, str]:
        port = free_port()
        out = tmp_path / f"run{len(more)}"
        res = subprocess.run([sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}/", "--method", "POST",
                              "--concurrency", "2", "--duration", "1", "--out", str(out), "--json", *more, "--",
                              sys.executable, str(Path(__file__).parent / "servers" / "cold_start.py"), str(port),
                              "1.5"], env=_env(), capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        return pq.read_table(out / "load.parquet").to_pylist(), json.loads(res.stdout), res.stderr

    rows, rep, said = load()
    assert max((r["end_ns"] - r["start_ns"]) / 1e6 for r in rows) < 1000  # the start is not in the level
    warm = json.loads((tmp_path / "run0" / "meta.json").read_text())["load"]["warmup"]
    assert warm["requests"] == warm["ok"] == 4 and warm["latency_ms"][-1] >= 1500, warm
    note = next(n for n in rep["serving"]["notes"] if n.startswith("warm-up: 4 request(s)"))
    assert "counted in no level" in note and note in said

    cold, rep, said = load("--no-warmup")
    assert max((r["end_ns"] - r["start_ns"]) / 1e6 for r in cold) >= 1500  # the first level paid the start
    assert not any(n.startswith("warm-up") for n in rep["serving"]["notes"]) and "warm-up" not in said
