"""``gpusleuth run --prometheus PORT``: live /metrics from the recorder while a real CPU torch job runs.

Scraped by hand (the counter grows, the listener is on 127.0.0.1 only) and by a real Prometheus server
(Debian's ``prometheus``, installed by .ci/run; without it that test skips and says why), whose HTTP API
must return data for every query of the shipped Grafana dashboard that does not need a GPU. The GPU
series are checked through the NVML test boundary with readings from the fixture (no GPU here).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import REPO, torch_exit_race

JOB = [sys.executable, str(REPO / "tests" / "jobs" / "phased_train.py")]
DASHBOARD = REPO / "integrations" / "grafana" / "gpusleuth.json"
PROMETHEUS = shutil.which("prometheus")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_run(tmp_path: Path, port: int, seconds: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gpusleuth", "run", "--no-gpu", "--prometheus", str(port), "--label", "phased",
         "--out", str(tmp_path / "run"), "--no-report", "--", *JOB, "--seconds", str(seconds)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _listening_addresses(port: int) -> set[str]:
    return {c.laddr.ip for c in psutil.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


def _outside_address() -> str | None:
    """An address of this machine that is not loopback, to show the listener does not answer there."""
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    return None


@pytest.mark.slow
def test_steps_total_grows_on_localhost_only(tmp_path):
    port = _free_port()
    proc = _start_run(tmp_path, port, seconds=12)
    try:
        seen: list[float] = []
        listening: set[str] = set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                families = _scrape(port)
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.3)
                continue
            listening |= _listening_addresses(port)
            steps = [s for s in families.get("gpusleuth_steps", []) if s.name == "gpusleuth_steps_total"]
            if steps:
                assert steps[0].labels == {"job": "phased", "rank": "0", "Hostname": socket.gethostname()}
                seen.append(steps[0].value)
                if len(seen) >= 3 and seen[-1] > seen[0]:
                    break
            time.sleep(0.7)
        assert len(seen) >= 3 and seen[-1] > seen[0] > 0, f"steps_total did not grow: {seen}"
        assert seen == sorted(seen)  # a counter never goes down
        assert listening == {"127.0.0.1"}
        outside = _outside_address()
        if outside is not None:
            with pytest.raises(OSError), socket.create_connection((outside, port), timeout=2):
                pass
        assert families["gpusleuth_data_wait_ratio"][0].value > 0
        assert families["gpusleuth_samples_per_second"][0].value > 0
    finally:
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert f"live metrics on http://127.0.0.1:{port}/metrics" in err
    # the listener left with the recorder
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    status = json.loads((tmp_path / "run" / "recorder.json").read_text())
    assert status["prometheus"] == f"http://127.0.0.1:{port}/metrics"


@pytest.mark.slow
def test_each_rank_of_a_torchrun_job_is_a_series(tmp_path):
    """Two DDP ranks (gloo, CPU) under torchrun: one step series per rank, the job named after its script."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpusleuth", "run", "--no-gpu", "--prometheus", str(port), "--out", str(tmp_path / "run"),
         "--no-report", "--", sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(REPO / "tests" / "jobs" / "ddp_train.py")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        ranks: dict[str, float] = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                samples = _scrape(port).get("gpusleuth_steps", [])
            except (urllib.error.URLError, ConnectionError):
                samples = []
            ranks = {s.labels["rank"]: s.value for s in samples if s.name == "gpusleuth_steps_total"}
            if len(ranks) == 2 and min(ranks.values()) >= 20:
                assert {s.labels["job"] for s in samples} == {"ddp_train.py"}
                break
            time.sleep(0.5)
        assert set(ranks) == {"0", "1"} and min(ranks.values()) >= 20, ranks
    finally:
        out, err = proc.communicate(timeout=180)
    # the series were checked above; a rank dying of torch's gloo exit race afterwards is passed on, rightly
    assert proc.returncode == 0 or torch_exit_race(err), err[-2000:]


@pytest.mark.process
def test_taken_port_stops_before_the_job(tmp_path, run_cli):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        res = run_cli("run", "--no-gpu", "--prometheus", port, "--out", tmp_path / "run", "--",
                      sys.executable, "-c", "print('ran')")
    assert res.returncode != 0
    assert f"cannot serve Prometheus metrics on {port}" in res.stderr
    assert "ran" not in res.stdout and "Traceback" not in res.stderr
    res = run_cli("run", "--no-gpu", "--prometheus", "host:port", "--", sys.executable, "-c", "pass")
    assert res.returncode != 0 and "--prometheus wants PORT or HOST:PORT" in res.stderr


def test_listen_addresses():
    from gpusleuth.recorder.exporter import parse_listen

    assert parse_listen("9464") == ("127.0.0.1", 9464)  # a bare port is localhost only
    assert parse_listen("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert parse_listen("[::1]:9464") == ("::1", 9464)
    assert parse_listen(":9464") == ("127.0.0.1", 9464)
    for bad in ("http", "host:", "70000"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_gpu_series_carry_dcgm_join_labels(tmp_path):
    """GPU samples as NvmlSampler produces them (from the fixture's readings) become base-unit series."""
    from test_nvml_sampler import FakeNvml, load

    from gpusleuth.recorder.exporter import LiveMetrics
    from gpusleuth.recorder.nvml import NvmlSampler

    fake = FakeNvml(load("h100_synthetic.json"))
    sampler, note = NvmlSampler.open(nvml=fake)
    assert sampler is not None, note
    rows = sampler.sample(time.time_ns())
    metrics = LiveMetrics(tmp_path, job="train.py", hostname="node-7")
    metrics.observe_gpu(rows, sampler.hardware())
    port = _free_port()
    host, bound = metrics.serve("127.0.0.1", port)
    try:
        families = _scrape(bound)
    finally:
        metrics.close()
    util = families["gpusleuth_gpu_utilization_ratio"]
    assert len(util) == len(rows)
    hw = {h["index"]: h for h in sampler.hardware()}
    for sample, row in zip(util, rows):
        assert sample.labels == {"gpu": str(row["gpu"]), "UUID": hw[row["gpu"]]["uuid"], "Hostname": "node-7",
                                 "job": "train.py"}
        assert sample.value == pytest.approx(row["util_gpu"] / 100)  # a ratio, not a percentage
    power = families["gpusleuth_gpu_power_watts"][0]
    assert power.value == pytest.approx(rows[0]["power_w"])
    mem = families["gpusleuth_gpu_memory_used_bytes"][0]
    assert mem.value == rows[0]["mem_used"]
    assert families["gpusleuth_gpu_energy_joules"][0].name == "gpusleuth_gpu_energy_joules_total"


def _prometheus_api(port: int, path: str, **params) -> dict:
    url = f"http://127.0.0.1:{port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]


def _dashboard_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p["targets"]]


def _concrete(expr: str) -> str:
    """Grafana's variables as a dashboard with 'All' selected and a 1 s scrape would expand them."""
    return expr.replace("$__rate_interval", "5s").replace("$job", ".*").replace("$Hostname", ".*")


@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS is None, reason="no prometheus binary (apt-get install prometheus; .ci/run does)")
def test_real_prometheus_scrapes_the_run_and_the_dashboard_has_data(tmp_path):
    port, api_port = _free_port(), _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: gpusleuth\n    honor_labels: true\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
    server = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{api_port}"],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "prometheus.log", "wb"),
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{api_port}/-/ready", timeout=2)
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()[-2000:]
                time.sleep(0.3)
        start = time.time()
        proc = _start_run(tmp_path, port, seconds=8)
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        end = time.time()
        time.sleep(1.5)  # let the last scrape land
        # the counter Prometheus stored grew during the run
        data = _prometheus_api(api_port, "query_range", query="gpusleuth_steps_total", start=start, end=end, step=1)
        assert data["result"], "Prometheus stored no gpusleuth_steps_total"
        series = data["result"][0]
        assert series["metric"]["job"] == "phased" and series["metric"]["rank"] == "0"
        values = [float(v) for _, v in series["values"]]
        assert len(values) >= 3 and values[-1] > values[0] and values == sorted(values)
        # every dashboard query returns data, except the GPU panels on a machine without a GPU
        queries = _dashboard_queries()
        assert len(queries) >= 10
        checked = 0
        for title, expr in queries:
            # every query must be valid PromQL (the API says "success"); those not about GPUs must have data
            res = _prometheus_api(api_port, "query_range", query=_concrete(expr), start=start, end=end, step=1)
            if "gpusleuth_gpu_" in expr:
                continue
            assert res["result"], f"dashboard panel {title!r} has no data: {_concrete(expr)}"
            checked += 1
        assert checked >= 6
        phases = _prometheus_api(api_port, "query", query="max_over_time(gpusleuth_phase_seconds_total[1m])", time=end)
        # the job's phases; gpusleuth's own (its one FLOP-counted step's excess: gpusleuth_flops) apart
        assert {r["metric"]["phase"] for r in phases["result"]} - {"gpusleuth_flops"} == {"eval"}
    finally:
        server.terminate()
        server.wait(timeout=30)


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("Threads:")).split()[1])


@pytest.mark.slow
def test_exporter_takes_a_scrape_storm_and_bounds_slowloris(tmp_path):
    """Issue 23 case 7: listen backlog 5 (44 of 200 concurrent scrapes timed out at 10 s) and no server-side
    timeout (165 slowloris connections held 171 recorder threads). Real sockets against the real recorder."""
    from concurrent.futures import ThreadPoolExecutor

    from gpusleuth.recorder.exporter import IDLE_TIMEOUT_S, MAX_HANDLERS

    port, stop = _free_port(), tmp_path / "stop"
    job = f"import os, time\nwhile not os.path.exists({str(stop)!r}): time.sleep(0.05)"
    proc = subprocess.Popen([sys.executable, "-m", "gpusleuth", "run", "--no-gpu", "--prometheus", str(port),
                             "--out", str(tmp_path / "run"), "--no-report", "--", sys.executable, "-c", job],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    socks: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                _scrape(port)
                break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        recorder = next(p.pid for p in psutil.Process(proc.pid).children()
                        if "gpusleuth.recorder.process" in " ".join(p.cmdline()))
        idle_threads = _threads(recorder)

        def scrape(_):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                    return r.status
            except OSError as exc:
                return repr(exc)

        with ThreadPoolExecutor(200) as pool:
            codes = list(pool.map(scrape, range(200)))  # 200 at once
        assert codes.count(200) == 200, [c for c in codes if c != 200][:5]

        for _ in range(165):  # slowloris: a request line, then silence
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        time.sleep(1.0)
        # one thread per connection being served, at most (+3: the recorder's own samplers may start one)
        assert _threads(recorder) <= idle_threads + MAX_HANDLERS + 3, (_threads(recorder), idle_threads)
        t0 = time.monotonic()
        for s in socks[:MAX_HANDLERS]:  # the first ones taken are closed by the server once idle
            s.settimeout(IDLE_TIMEOUT_S + 20)
            assert s.recv(100) == b""  # EOF from the server's side (a client timeout raises instead)
        assert time.monotonic() - t0 < IDLE_TIMEOUT_S + 20
        for s in socks:
            s.close()
        socks.clear()
        assert scrape(0) == 200  # and it serves again
    finally:
        for s in socks:
            s.close()
        stop.touch()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
