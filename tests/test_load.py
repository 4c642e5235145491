"""``gpusleuth load`` against real servers with a known service time (no mocks).

The in-process server serves ``/work`` with 4 slots of 50 ms each (a semaphore): capacity 80 req/s. So a
closed loop of 1 worker gets 20 req/s at p50 50 ms, 4 workers get 80 req/s at 50 ms, 16 workers still
80 req/s but wait for a slot: p50 ≈ 16/4 × 50 ms = 200 ms. The knee is 4. ``/fail`` answers 500, ``/hang``
answers after 2 s. The ``-- CMD`` tests start a real ``python server.py PORT`` under recording.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from conftest import free_port, gpusleuth
from gpusleuth.serving.analysis.load import analyze_load
from gpusleuth.serving.recorder.load_plan import LoadPlan
from gpusleuth.serving.recorder.loadgen import run_plan
from gpusleuth.run.model import Run, Table

SLOTS, SERVICE_S = 4, 0.05
CAPACITY = SLOTS / SERVICE_S  # 80 req/s


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body in two sends must not wait for a delayed ACK
    slots = threading.Semaphore(SLOTS)
    hits = 0  # requests seen (a test waits on it to know a client is sending)
    held: list[tuple[int, int]] = []  # the server's own clock: each /work request's slot, taken → given back (ns)

    def do_GET(self):
        type(self).hits += 1
        if self.path.startswith("/fail"):
            return self._answer(500, b"no")
        if self.path.startswith("/hang"):
            time.sleep(2.0)
        if self.path.startswith("/work"):
            with self.slots:
                t0 = time.time_ns()
                time.sleep(SERVICE_S)
                type(self).held.append((t0, time.time_ns()))
        self._answer(200, b"ok")

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        json_ok = self.headers.get("Content-Type") == "application/json" and body.startswith(b"{")
        self._answer(200 if json_ok else 400, body)

    def _chunked(self) -> None:
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"3\r\nabc\r\n5;ext=1\r\nhello\r\n0\r\n\r\n")

    def _answer(self, code: int, body: bytes) -> None:
        if self.path.startswith("/chunked"):
            return self._chunked()
        if self.path.startswith("/close"):  # answers, then closes the connection: the next request reconnects
            self.close_connection = True
            self.send_response(code)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)  # no Content-Length: the body runs to the close
            return
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a timed-out client closes its end: the server's broken pipe is expected here


@pytest.fixture(scope="module")
def server():
    srv = _Server(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _analyze(plan: LoadPlan, result) -> "object":
    run = Run(meta={"load": plan.to_meta()}, load=Table(result.columns))
    return analyze_load(run)


def test_closed_loop_matches_the_service_time_and_finds_the_knee(server, host_load):
    """The generator's rates and latencies against the server's planted service time and 4 slots, and the
    knee (the smallest level within 5 % of the best throughput). Generator and server are threads of this
    process: where other processes took cores they wake late and the numbers miss — then the test skips, saying
    the load it measured; on a quiet host a miss fails. What holds under any load is asserted always: no
    request faster than the service time, each level's rate the server's own (its slots, by its own clock), and
    the knee where the server's own rates put it.

    The knee is not planted: at concurrency 4 each slot idles for every request's round trip (client, parsing,
    answer, the next send), at 16 other clients fill it, so 4 reaches the best rate within 5 % only while that
    round trip stays under 2.6 ms (5 % of 50 ms). The test uses 0.2 CPU-seconds of its 5 s; what stretches the
    round trip is waking late on a busy host, which a mean of foreign CPU over the whole test does not bound:
    measured 0.99 of the best at 4 with others' processes using 1-2 cores, 0.87-0.98 with two CPU burners
    besides, and gpusleuth's rates were the server's own to 0.1 % in every run."""
    _Handler.held.clear()
    plan = LoadPlan(url=server + "/work", mode="closed", levels=[1, 4, 16], duration_s=1.5)
    result = run_plan(plan)
    a = _analyze(plan, result)
    one, four, sixteen = a.levels
    assert [lv.concurrency for lv in a.levels] == [1, 4, 16]
    assert SERVICE_S * 1e3 <= one.p50_ms and SERVICE_S * 1e3 <= four.p50_ms
    assert one.errors == four.timeouts == 0 and one.ok == one.requests
    assert a.mode == "closed" and "no --p95-budget-ms" in a.knee_reason
    # the server's own rate per level: its slots over the level's span, a slot across an edge by its part inside
    held = np.asarray(_Handler.held, dtype=np.int64)
    served = []
    for lv in a.levels:
        inside = np.clip(np.minimum(held[:, 1], lv.end_ns) - np.maximum(held[:, 0], lv.start_ns), 0, None)
        served.append(float((inside / (held[:, 1] - held[:, 0])).sum()) / ((lv.end_ns - lv.start_ns) / 1e9))
    assert [lv.rps for lv in a.levels] == pytest.approx(served, rel=0.02), served
    # the knee where the server's own rates put it: concurrency 4 when it had 96.5 % of the best or more, 16 when
    # under 93.5 %; between, the 5 % line is within what the two clocks' edges move, and either is right
    at_four = served[1] / max(served)
    want = [1] if at_four >= 0.965 else [2] if at_four < 0.935 else [1, 2]
    assert a.knee in want, f"knee at level {a.knee}, the server's own rates put it at {want} ({at_four:.3f} at 4)"
    with host_load.quiet_or_skip("the closed-loop rates and latencies"):
        assert one.rps == pytest.approx(1 / SERVICE_S, rel=0.2)
        assert four.rps == pytest.approx(CAPACITY, rel=0.15)
        assert sixteen.rps == pytest.approx(CAPACITY, rel=0.15)
        assert one.p50_ms <= SERVICE_S * 1e3 * 1.4  # 2 shared cores: some slack
        assert four.p50_ms <= SERVICE_S * 1e3 * 1.5
        assert sixteen.p95_ms > 2 * 16 / SLOTS * SERVICE_S * 1e3 * 0.75
        # 16 workers queue for 4 slots: by Little's law the mean latency is 16 / 80 req/s = 200 ms. The semaphore
        # is not FIFO (a request arriving as a slot is given back can take it before the one woken for it), so
        # the median is anywhere from the service time to the mean (80-197 ms measured) and the tail is long:
        # the mean is what queueing sets
        c = result.columns
        lat = (c["end_ns"] - c["start_ns"])[c["level"] == 2] / 1e6
        assert lat.mean() == pytest.approx(16 / sixteen.rps * 1e3, rel=0.15)
        assert lat.mean() > 3 * four.p50_ms


def test_open_loop_sends_on_schedule_and_drops_over_max_inflight(server):
    plan = LoadPlan(url=server + "/work", mode="open", levels=[20, 200], duration_s=1.0, max_inflight=8)
    result = run_plan(plan)
    a = _analyze(plan, result)
    low, high = a.levels
    assert a.mode == "open" and low.concurrency == 0 and low.rate == 20
    assert low.requests == 20 and low.ok == 20 and low.dropped == 0
    assert low.p50_ms == pytest.approx(SERVICE_S * 1e3, rel=0.3)  # no queue at a quarter of capacity
    assert high.requests == 200  # every scheduled request is a row, sent or dropped
    assert high.dropped > 50  # 200/s against 80/s: more than 8 outstanding soon
    assert high.rps < 120 and any("dropped" in n for n in a.notes)
    starts = np.sort(result.columns["start_ns"][result.columns["level"] == 0])
    assert np.median(np.diff(starts)) / 1e6 == pytest.approx(50.0, rel=0.05)  # on the 20/s schedule


def test_errors_and_timeouts_are_counted(server):
    plan = LoadPlan(url=server + "/fail", mode="closed", levels=[2], duration_s=0.5)
    a = _analyze(plan, run_plan(plan))
    lv = a.levels[0]
    assert lv.requests > 10 and lv.errors == lv.requests and lv.ok == 0 and lv.p50_ms is None
    assert a.knee is None and "no level got a 2xx" in a.knee_reason
    plan = LoadPlan(url=server + "/hang", mode="closed", levels=[2], duration_s=0.3, timeout_s=0.2)
    a = _analyze(plan, run_plan(plan))
    lv = a.levels[0]
    assert lv.timeouts == lv.requests >= 2 and lv.errors == 0


def _run(levels: dict[int, tuple[float, float, int]]) -> Run:
    """A load table whose level i has rps-worth of 1 s requests of the given latency, and some failures."""
    cols = {k: [] for k in ("level", "concurrency", "rate", "start_ns", "end_ns", "status", "error")}
    t0 = 1_700_000_000 * 10**9
    for i, (rps, lat_ms, failed) in levels.items():
        n = int(rps)
        for k in range(n + failed):
            s = t0 + i * 10**10 + k * (10**9 // max(n, 1))
            cols["level"].append(i)
            cols["concurrency"].append(2 ** i)
            cols["rate"].append(0.0)
            cols["start_ns"].append(s)
            cols["end_ns"].append(s + int(lat_ms * 1e6))
            cols["status"].append(200 if k < n else 500)
            cols["error"].append("" if k < n else "http")
    return Run(meta={"load": {"p95_budget_ms": None}},
               load=Table({k: np.asarray(v, dtype=object if k == "error" else None) for k, v in cols.items()}))


def test_knee_rule_budget_and_failing_levels():
    run = _run({0: (40, 10, 0), 1: (97, 20, 0), 2: (100, 60, 0), 3: (101, 300, 0)})
    a = analyze_load(run)
    assert a.knee == 1  # 97 is within 5 % of 101: the smallest such level
    run.meta["load"]["p95_budget_ms"] = 15
    a = analyze_load(run)
    assert a.knee is None and "req/s at concurrency 1 (p95 10.0 ms)" in a.knee_reason
    run.meta["load"]["p95_budget_ms"] = 100
    assert analyze_load(run).knee == 1
    failing = _run({0: (40, 10, 0), 1: (100, 20, 5), 2: (100, 30, 0)})
    a = analyze_load(failing)
    assert a.knee == 2 and "failed requests not considered" in a.knee_reason


def _server_file(tmp_path: Path, body: str = "") -> Path:
    path = tmp_path / "server.py"
    path.write_text(
        "import sys, time, threading\n"
        "from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler\n"
        + body +
        "lock = threading.Lock()\n"
        "class H(BaseHTTPRequestHandler):\n"
        "    protocol_version = 'HTTP/1.1'\n"
        "    disable_nagle_algorithm = True\n"
        "    def do_GET(self):\n"
        "        with lock:\n"
        "            time.sleep(0.02)\n"
        "        self.send_response(200); self.send_header('Content-Length', '2'); self.end_headers()\n"
        "        self.wfile.write(b'ok')\n"
        "    def log_message(self, *a): pass\n"
        "srv = ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H)\n"
        "print('SERVER-UP', flush=True)\n"
        "try:\n"
        "    srv.serve_forever()\n"
        "except KeyboardInterrupt:\n"
        "    print('SERVER-STOPPED-CLEANLY', flush=True)\n"
    )
    return path


@pytest.mark.process
def test_with_a_server_command_one_run_directory_holds_everything(tmp_path, host_load):
    port = free_port()
    out = tmp_path / "run"
    res = gpusleuth("load", f"http://user:secret@127.0.0.1:{port}/x?key=hidden", "--concurrency", "1,4",
                    "--duration", "1", "--out", out, "--json", "--",
                    sys.executable, _server_file(tmp_path), port, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    for name in ("load.parquet", "host.parquet", "procs.parquet", "output.log", "meta.json"):
        assert (out / name).exists(), name
    meta = json.loads((out / "meta.json").read_text())
    assert meta["stopped_by"].startswith("gpusleuth load") and meta["exit_code"] == 0  # SIGINT, handled
    assert meta["load"]["url"] == f"http://127.0.0.1:{port}/x?…"  # no credentials, no query
    assert "secret" not in (out / "meta.json").read_text() and "hidden" not in (out / "meta.json").read_text()
    log = (out / "output.log").read_text()
    assert "SERVER-UP" in log and "SERVER-STOPPED-CLEANLY" in log
    report = json.loads(res.stdout)
    serving = report["serving"]
    assert [lv["concurrency"] for lv in serving["levels"]] == [1, 4]
    with host_load.quiet_or_skip("the server's rate at concurrency 4"):  # its threads wake late on a busy host
        assert serving["levels"][1]["rps"] == pytest.approx(50, rel=0.2)  # the 20 ms lock caps it at 50/s
    assert serving["levels"][1]["rps"] <= 50 * 1.1  # … and no load makes the lock faster
    assert serving["outcomes"]["price_note"].startswith("unpriced")
    cpu = meta["load"]["generator_cpu_cores"]  # what the generator itself took, per level
    assert len(cpu) == 2 and all(0 < c < 1.5 for c in cpu)
    assert [lv["generator_cpu_cores"] for lv in serving["levels"]] == cpu
    for lv in serving["levels"]:  # the server's own CPU in each level, from its recorded process samples
        assert 0 <= lv["server_top_process_cores"] <= lv["server_cpu_cores"] < 2.5 and 0 < lv["host_cpu_share"] <= 1
    # the load lies inside the recording, on the same clock as the server's samples
    import pyarrow.parquet as pq

    load, host = pq.read_table(out / "load.parquet"), pq.read_table(out / "host.parquet")
    starts = load.column("start_ns").to_numpy()
    assert meta["start_ns"] < starts.min() and load.column("end_ns").to_numpy().max() < meta["end_ns"]
    t = host.column("t_ns").to_numpy()
    assert ((t > starts.min()) & (t < starts.max())).sum() >= 5
    again = gpusleuth("report", out)
    assert again.returncode == 0 and "Serving under load" in again.stdout and "knee →" in again.stdout


@pytest.mark.process
def test_a_server_that_dies_at_start_is_a_sentence(tmp_path):
    bad = tmp_path / "server.py"
    bad.write_text("import sys\nprint('cannot load the model', file=sys.stderr)\nsys.exit(3)\n")
    res = gpusleuth("load", f"http://127.0.0.1:{free_port()}/", "--duration", "1", "--out", tmp_path / "r",
                    "--", sys.executable, bad, timeout=60)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "exited with code 3" in res.stderr and "output.log" in res.stderr
    assert "cannot load the model" in (tmp_path / "r" / "output.log").read_text()


@pytest.mark.parametrize("url, says", [("ftp://127.0.0.1/", "must start with http"),
                                       ("http://", "names no host"),
                                       ("http://127.0.0.1:1/", "did not answer")])
@pytest.mark.process
def test_a_bad_url_is_a_sentence(url, says):
    res = gpusleuth("load", url, "--duration", "1", "--ready-timeout", "0.5", timeout=60)
    assert res.returncode in (1, 2) and says in res.stderr and "Traceback" not in res.stderr


@pytest.mark.process
def test_url_alone_writes_a_load_only_run_directory(server, tmp_path):
    out = tmp_path / "r"
    hostile = "/work/<script>alert(1)</script>"  # the URL is untrusted text in the page
    res = gpusleuth("load", server + hostile, "--concurrency", "2", "--duration", "0.5", "--out", out,
                    "--html", tmp_path / "r.html", timeout=60)
    assert res.returncode == 0, res.stderr
    assert "knee →" in res.stdout and (out / "load.parquet").exists() and not (out / "raw").exists()
    page = (tmp_path / "r.html").read_text()
    assert "Serving under load" in page and "latency" in page
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    rep = gpusleuth("report", out, "--json", "--price-per-gpu-hour", "3.6")  # no GPU seen: the server's price
    assert rep.returncode == 0, rep.stderr
    serving = json.loads(rep.stdout)["serving"]
    assert serving["levels"][0]["concurrency"] == 2 and serving["at"] == serving["knee"] == 0
    assert serving["outcomes"]["dollars_per_million"] == pytest.approx(0.001 / serving["levels"][0]["rps"] * 1e6)


@pytest.mark.process
def test_a_damaged_load_file_is_a_loss_not_a_traceback(server, tmp_path):
    out = tmp_path / "r"
    assert gpusleuth("load", server + "/", "--concurrency", "1", "--duration", "0.3", "--out", out).returncode == 0
    (out / "load.parquet").write_bytes(b"PAR1 this is not parquet")
    rep = gpusleuth("report", out)
    assert rep.returncode == 0 and "load.parquet is unreadable" in rep.stdout and "Traceback" not in rep.stderr


@pytest.mark.process
def test_fastapi_under_uvicorn(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    (tmp_path / "app.py").write_text(
        "import asyncio\nfrom fastapi import FastAPI\napp = FastAPI()\n"
        "@app.post('/predict')\nasync def predict(item: dict):\n"
        "    await asyncio.sleep(0.01)\n    return {'n': len(item)}\n")
    body = tmp_path / "req.json"
    body.write_text('{"text": "hello"}')
    port = free_port()
    res = gpusleuth("load", f"http://127.0.0.1:{port}/predict", "--body-file", body, "--concurrency", "1,8",
                    "--duration", "1", "--out", tmp_path / "r", "--json", "--",
                    sys.executable, "-m", "uvicorn", "app:app", "--port", str(port), "--log-level", "warning",
                    cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    levels = json.loads(res.stdout)["serving"]["levels"]
    assert all(lv["ok"] == lv["requests"] > 0 for lv in levels)  # POST with a JSON body: 200, not 422
    assert levels[1]["rps"] > 2 * levels[0]["rps"]  # async sleeps overlap: throughput grows with concurrency


def test_gpu_busy_energy_and_price_per_million_at_the_knee():
    """GPU samples inside a level's window: 40 % busy at 100 W for its ~1 s, so ~100 J over ~100 answers."""
    run = _run({0: (50, 10, 0), 1: (100, 20, 0)})
    lo = int(run.load["start_ns"][run.load["level"] == 1].min())
    t = lo + np.arange(0, 11) * 10**8  # 10 Hz over the level's second
    run.gpu = Table({"t_ns": t, "gpu": np.zeros(len(t), np.int64), "util_gpu": np.full(len(t), 40.0),
                     "power_w": np.full(len(t), 100.0)})
    a = analyze_load(run, dollars_per_second=0.001)
    knee = a.levels[a.knee]
    assert a.knee == 1 and knee.gpu_busy == pytest.approx(0.40)
    assert knee.energy_j_per_request == pytest.approx(100.0 / knee.ok, rel=0.01)
    assert a.levels[0].gpu_busy is None  # no sample inside the first level
    assert a.dollars_per_million == pytest.approx(0.001 / knee.rps * 1e6) and a.price_note is None
    assert "unpriced" in analyze_load(run).price_note


@pytest.mark.parametrize("path", ["/chunked", "/close"])
def test_chunked_bodies_and_closed_connections_are_read_whole(server, path):
    plan = LoadPlan(url=server + path, mode="closed", levels=[2], duration_s=0.3)
    lv = _analyze(plan, run_plan(plan)).levels[0]
    assert lv.requests > 10 and lv.ok == lv.requests


@pytest.mark.process
def test_bodies_from_a_directory_are_posted_round_robin(server, tmp_path):
    bodies = tmp_path / "bodies"
    bodies.mkdir()
    for i in range(3):
        (bodies / f"{i}.json").write_text(json.dumps({"i": i}))
    out = tmp_path / "r"
    res = gpusleuth("load", server + "/echo", "--bodies", bodies, "--concurrency", "1", "--requests", "6",
                    "--out", out, "--json", timeout=60)
    assert res.returncode == 0, res.stderr
    lv = json.loads(res.stdout)["serving"]["levels"][0]
    assert lv["requests"] == 6 and lv["ok"] == 6  # POST (a body was given) with Content-Type: application/json
    assert json.loads((out / "meta.json").read_text())["load"]["method"] == "POST"


@pytest.mark.process
def test_fuzzed_load_results_are_salvaged_or_a_sentence(server, tmp_path):
    """The fuzz harness's run-directory mutations (tests/fuzz_inputs.py), aimed at what `load` adds:
    load.parquet flipped, cut, emptied, garbage, a FIFO, a directory; meta.json's `load` mistyped."""
    import random

    import fuzz_inputs as F

    seed = tmp_path / "seed"
    res = gpusleuth("load", server + "/", "--concurrency", "1,2", "--duration", "0.3", "--out", seed,
                    "--p95-budget-ms", "50")
    assert res.returncode == 0, res.stderr
    (seed / "summary.json").unlink()
    ref = F.reference_report(seed, tmp_path)
    assert ref["serving"]["levels"]
    cases = [c for c in F.rundir_cases(seed, random.Random(5)) if "load" in c.name]
    for value in (*F._META_VALUES, {"p95_budget_ms": "x", "url": 5, "levels": "?"}):
        cases.append(F.Case(f"meta/load={str(value)[:12]}", None, F.ANY, make=F._edit(seed, F._set_meta("load", value))))
    outcomes = [F.run_case(c, tmp_path, ref, timeout=10) for c in cases]
    assert len(outcomes) >= 15
    bugs = [(c.name, o.cls, o.detail[-300:]) for c, o in zip(cases, outcomes) if o.cls in F.BUGS]
    assert not bugs, bugs


@pytest.mark.process
def test_a_server_that_never_answers_is_stopped_with_a_sentence(tmp_path):
    silent = tmp_path / "server.py"
    silent.write_text("import time\nprint('loading forever', flush=True)\ntry:\n    time.sleep(60)\n"
                      "except KeyboardInterrupt:\n    pass\n")
    t0 = time.monotonic()
    res = gpusleuth("load", f"http://127.0.0.1:{free_port()}/", "--ready-timeout", "1", "--grace", "2",
                    "--out", tmp_path / "r", "--", sys.executable, silent, timeout=60)
    assert res.returncode == 1 and "did not answer within 1 s" in res.stderr and "Traceback" not in res.stderr
    assert time.monotonic() - t0 < 30  # stopped by SIGINT, not waited out
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["stopped_by"].startswith("gpusleuth load") and not (tmp_path / "r" / "load.parquet").exists()


@pytest.mark.process
def test_ctrl_c_keeps_what_was_measured(server, tmp_path):
    import os
    import signal
    import subprocess

    out = tmp_path / "r"
    proc = subprocess.Popen([sys.executable, "-m", "gpusleuth", "load", server + "/work", "--concurrency", "1,4",
                             "--duration", "30", "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ))
    before, deadline = _Handler.hits, time.monotonic() + 20
    # it is sending the first level (after its 4 warm-up requests): its Ctrl-C handler is set
    while _Handler.hits < before + 4 + 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in stderr
    assert "stopped early: level 1 of 2 was cut short and 1 more did not run" in stdout
    assert (out / "load.parquet").exists()


@pytest.mark.process
def test_a_server_that_dies_under_load_keeps_the_rows_and_says_so(tmp_path):
    """The server exits by itself after 20 answers: the rows so far are reported, the exit code is 1."""
    server_py = _server_file(tmp_path, "import os\nserved = [0]\n")
    server_py.write_text(server_py.read_text().replace(
        "        self.wfile.write(b'ok')\n",
        "        self.wfile.write(b'ok')\n        served[0] += 1\n"
        "        if served[0] >= 20:\n            self.wfile.flush(); os._exit(7)\n"))
    res = gpusleuth("load", f"http://127.0.0.1:{(port := free_port())}/", "--concurrency", "1,4", "--duration", "3",
                    "--out", tmp_path / "r", "--json", "--", sys.executable, server_py, port, timeout=60)
    # the server's own output is teed into stderr too (and kept in output.log): only gpusleuth's lines are judged
    server_lines = set((tmp_path / "r" / "output.log").read_text(errors="replace").splitlines())
    ours = "\n".join(ln for ln in res.stderr.splitlines() if ln not in server_lines)
    assert res.returncode == 1 and "Traceback" not in ours, res.stderr
    assert "exited with code 7" in res.stderr
    report = json.loads(res.stdout)
    assert any("the load was cut short" in x for x in report["losses"])
    levels = report["serving"]["levels"]
    assert levels[0]["ok"] >= 15 and levels[0]["errors"] > 0  # refused after it died (4 of its 20 answers: warm-up)
    assert any("stopped early" in n for n in report["serving"]["notes"])


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """The same handler over https, with a self-signed certificate made by openssl."""
    import shutil
    import ssl
    import subprocess

    if not shutil.which("openssl"):
        pytest.skip("no openssl to make a certificate")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "cert.pem", d / "key.pem")
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.mark.process
def test_https_untrusted_certificate_is_a_sentence_and_insecure_loads_it(tls_server):
    res = gpusleuth("load", tls_server + "/", "--concurrency", "2", "--duration", "0.3", timeout=60)
    assert res.returncode == 1 and "TLS certificate is not trusted" in res.stderr and "--insecure" in res.stderr
    res = gpusleuth("load", tls_server + "/", "--concurrency", "2", "--duration", "0.5", "--insecure", "--json",
                    timeout=60)
    assert res.returncode == 0, res.stderr
    lv = json.loads(res.stdout)["serving"]["levels"][0]
    assert lv["requests"] > 5 and lv["ok"] == lv["requests"]


def test_the_python_310_timeout_fallback_times_out():
    import asyncio

    from gpusleuth.serving.recorder.time_limit import _WaitFor

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            async with _WaitFor(0.05):
                await asyncio.sleep(2)
        async with _WaitFor(1.0):
            await asyncio.sleep(0.01)  # finishes in time: nothing raised
        return True

    assert asyncio.run(main())


def test_cancel_does_not_wait_out_a_hung_server(server):
    """Ctrl-C (the cancel event) abandons requests in flight instead of waiting for their --timeout."""
    cancel = threading.Event()
    plan = LoadPlan(url=server + "/hang", mode="closed", levels=[2, 4], duration_s=5, timeout_s=30)
    threading.Timer(0.5, cancel.set).start()
    t0 = time.monotonic()
    result = run_plan(plan, cancel)
    assert time.monotonic() - t0 < 1.5
    c = result.columns  # the 2 requests in flight are said as cut (issue 23 case 6), with no latency invented
    assert list(c["error"]) == ["cancelled", "cancelled"] and list(c["status"]) == [0, 0]
    a = _analyze(plan, result)
    lv = a.levels[0]
    assert lv.cut == 2 and lv.ok == lv.errors == lv.timeouts == 0 and lv.p50_ms is None
    assert any("2 of the 2 requests sent were in flight when the load was stopped" in n for n in a.notes)


class _ClosesAfterEachAnswer:
    """Answers every request (Content-Length, ``Connection: keep-alive``), then closes the connection anyway
    — as llama.cpp's server does after every streamed answer — but reads for ``linger_s`` first: a request
    that arrives in that window was written onto a connection the server was closing (a doomed write the
    client must then notice, reconnect and send again)."""

    def __init__(self, linger_s: float = 0.05):
        import socket

        self.linger_s, self.doomed, self.accepted = linger_s, 0, 0
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn) -> None:
        with conn:
            buf = b""
            while b"\r\n\r\n" not in buf:
                piece = conn.recv(4096)
                if not piece:
                    return
                buf += piece
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n"
                         b"Keep-Alive: timeout=5, max=100\r\n\r\nok")
            conn.settimeout(self.linger_s)
            try:
                if conn.recv(4096):
                    self.doomed += 1
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("mode,level", [("closed", 3), ("open", 200)])
def test_a_server_that_closes_after_each_answer_gets_a_fresh_connection_per_request(mode, level):
    """Learnt once per target (issue 26, llama.cpp's server): after a connection that carried one answer
    was found closed, every request opens its own connection instead of writing onto the old one first.
    Only the requests already on their way when it was learnt (at most one a worker) go onto a closing
    connection; before, every request after a connection's first did (~1 ms of TTFT each)."""
    srv = _ClosesAfterEachAnswer()
    try:
        plan = LoadPlan(url=srv.url, mode=mode, levels=[level], duration_s=0.5, requests=60, timeout_s=5)
        lv = _analyze(plan, run_plan(plan)).levels[0]
    finally:
        srv.close()
    assert lv.requests == lv.ok == 60, lv
    assert srv.accepted >= 60
    assert srv.doomed <= (level if mode == "closed" else 10), (srv.doomed, srv.accepted)  # before: 56 of 60


def test_a_server_that_keeps_connections_keeps_them(server):
    """The other side of the lesson above: a keep-alive server's connections are reused (no fresh connection
    per request), and one closed after many answers (an idle timeout, a max) teaches nothing."""
    from gpusleuth.serving.recorder.http_client import Connection, parse_target
    import asyncio

    target = parse_target(server + "/")

    async def main() -> tuple[int, int]:
        conn, statuses, writers = Connection(target), [], set()
        for _ in range(5):
            statuses.append(await conn.send(target.request(b"")))
            writers.add(id(conn.writer))
        conn.writer.transport.abort()  # the server's idle timeout, after five answers
        statuses.append(await conn.send(target.request(b"")))
        conn.close()
        return statuses.count(200), len(writers)

    ok, connections = asyncio.run(main())
    assert ok == 6 and connections == 1 and not target.memo.closes_after_answer


@pytest.mark.unit
def test_the_readiness_probe_leaves_no_reset_in_the_servers_log():
    """The probe reads only the head; closing with the announced body unread (or before the server wrote it)
    resets the connection, and Python's ``http.server`` prints a ``ConnectionResetError`` (or ``BrokenPipeError``)
    traceback into the server's own log (CI saw one in a load test's server). A short body is read before the
    close: the server sees a clean end."""
    import asyncio
    import time as _time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from gpusleuth.serving.recorder.http_client import parse_target
    from gpusleuth.serving.recorder.server_probe import wait_ready

    errors: list[str] = []

    class Slow(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(4 * 8192))
            self.end_headers()  # the head goes out now (wbufsize 0) ...
            for _ in range(4):  # ... the body in pieces, a moment later: the client may have closed by then
                _time.sleep(0.05)
                self.wfile.write(b"x" * 8192)

        def log_message(self, *a):
            pass

    class Srv(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            import sys as _sys
            errors.append(repr(_sys.exc_info()[1]))

    srv = Srv(("127.0.0.1", 0), Slow)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        why, _ = asyncio.run(wait_ready(parse_target(f"http://127.0.0.1:{srv.server_address[1]}/", "GET"), 10))
        assert why is None
        _time.sleep(0.3)  # the handler's thread reads the connection's end
    finally:
        srv.shutdown()
        srv.server_close()
    assert errors == []
