"""Live Prometheus metrics for ``gpusleuth run --prometheus [HOST:]PORT``: ``/metrics`` while the job runs.

Why in the recorder: it is the process that already holds the newest GPU and host samples in memory, it
outlives the job's crashes, and it is not the job — a scrape can never slow the training loop. The
recorder loop hands each sample to :meth:`LiveMetrics.observe_gpu` / :meth:`observe_host` (a reference
swap, nothing else); the job's step and phase events are read from ``raw/events-*.tsv`` only when
Prometheus scrapes, tailing each file from where the last scrape stopped, so the cost is proportional to
what the job wrote since, and zero when nobody scrapes.

Naming follows Prometheus conventions (``gpusleuth_`` prefix, base units — seconds, bytes, watts, joules,
ratios 0–1 — and ``_total`` for counters). GPU series carry dcgm-exporter's join labels (``gpu``, ``UUID``,
``Hostname``) so a dashboard can put them next to ``DCGM_FI_*`` series; every series carries ``job`` (the
run's label, or the command's name) and step series carry ``rank``. A private registry keeps
prometheus-client's own process/GC collectors out, and the listener binds 127.0.0.1 unless the user
names a host. See docs/prometheus.md.

The listener is ours, not ``prometheus_client.start_http_server`` (a listen backlog of 5 — 44 of 200
concurrent scrapes timed out — and a thread per connection with no timeout: 165 slowloris connections held
171 recorder threads): a backlog of :data:`LISTEN_BACKLOG`, at most :data:`MAX_HANDLERS` connections handled
at once (the rest wait in the kernel's queue, not in our threads), and a connection idle for
:data:`IDLE_TIMEOUT_S` is closed. The exposition itself is prometheus-client's WSGI app.
"""

from __future__ import annotations

import math
import os
import socket
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from gpusleuth.run.layout import RunDir
from gpusleuth.analysis.window import window_stats
from gpusleuth.sources.livetail import WINDOW_STEPS, StepTotals

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

DEFAULT_HOST = "127.0.0.1"
LISTEN_BACKLOG = 512  # connections the kernel holds for us while every handler is busy
MAX_HANDLERS = 16  # connections served at once: the recorder's threads stay bounded
IDLE_TIMEOUT_S = 5.0  # a connection that sends nothing for this long is closed (a scrape sends at once)


def parse_listen(text: str) -> tuple[str, int]:
    """``PORT`` or ``HOST:PORT`` (``[::1]:PORT`` for IPv6) → (host, port); a bare port binds localhost only."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host = DEFAULT_HOST
    host = host.strip("[]") or DEFAULT_HOST
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"--prometheus wants PORT or HOST:PORT, got {text!r}") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"--prometheus port must be 0..65535, got {number}")
    return host, number


def _finite(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


class LiveMetrics:
    """A prometheus-client collector over the recorder's newest samples and the job's step events."""

    def __init__(self, run_dir: Path, job: str, hostname: str | None = None):
        self.run_dir = Path(run_dir)
        self.job = job
        self.hostname = hostname or os.uname().nodename
        self.gpu_info: dict[int, dict[str, Any]] = {}
        self._gpu_rows: list[dict[str, Any]] = []
        self._host_row: dict[str, Any] | None = None
        self._lock = threading.Lock()  # scrapes may overlap; the tail keeps file offsets
        self._steps = StepTotals(RunDir(self.run_dir).raw)
        self.server: BoundedWSGIServer | None = None
        self.address: tuple[str, int] | None = None
        # the stall watch's view (recorder/stallwatch.py), swapped in once a second
        self._progress: dict[int, tuple[int | None, float, bool]] = {}
        self._stalls = 0
        self._stall_s = 0.0

    # -- fed by the recorder loop (cheap: a reference swap) ------------------------------------
    def observe_gpu(self, rows: list[dict[str, Any]], hardware: list[dict[str, Any]]) -> None:
        if not self.gpu_info and hardware:
            self.gpu_info = {int(h["index"]): h for h in hardware if h.get("index") is not None}
        self._gpu_rows = rows

    def observe_host(self, row: dict[str, Any]) -> None:
        self._host_row = row

    def observe_progress(self, progress: dict[int, tuple[int | None, float, bool]], stalls: int,
                         stall_s: float) -> None:
        """pid → (rank, seconds since its last progress, stalled); stalls seen so far; the open one's length."""
        self._progress, self._stalls, self._stall_s = progress, stalls, stall_s

    # -- serving --------------------------------------------------------------------------------
    def serve(self, host: str, port: int) -> tuple[str, int]:
        """Start the HTTP listener in a daemon thread; returns the bound address (port 0 picks one)."""
        from prometheus_client import CollectorRegistry, make_wsgi_app

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        server = BoundedWSGIServer((host, port), make_wsgi_app(registry))
        threading.Thread(target=server.serve_forever, name="gpusleuth-exporter", daemon=True).start()
        self.server = server
        self.address = (host, server.server_port)
        return self.address

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        from gpusleuth._version import __version__

        with self._lock:
            self._steps.poll()
            step_families = self._step_families(CounterMetricFamily, GaugeMetricFamily)
        yield InfoMetricFamily("gpusleuth_build", "gpusleuth version recording this job",
                               value={"version": __version__, "job": self.job, "Hostname": self.hostname})
        yield from step_families
        yield from self._gpu_families(CounterMetricFamily, GaugeMetricFamily)
        yield from self._host_families(GaugeMetricFamily)
        yield from self._stall_families(CounterMetricFamily, GaugeMetricFamily)

    def _stall_families(self, Counter: type[CounterMetricFamily], Gauge: type[GaugeMetricFamily]) -> list[Metric]:
        labels = ["job", "rank", "Hostname"]
        since = Gauge("gpusleuth_seconds_since_progress",
                      "seconds since the rank's last step end or phase boundary (the stall watch's view)",
                      labels=labels)
        stalled = Gauge("gpusleuth_stalled", "1 while the rank is stalled: no progress past its threshold, "
                        "outside any phase", labels=labels)
        for pid, (rank, seconds, is_stalled) in sorted(self._progress.items()):
            lv = [self.job, str(rank) if rank is not None else "0", self.hostname]
            since.add_metric(lv, round(seconds, 3))
            stalled.add_metric(lv, 1.0 if is_stalled else 0.0)
        open_s = Gauge("gpusleuth_stall_seconds", "length of the stall going on now (0: none): alert on it",
                       labels=["job", "Hostname"])
        open_s.add_metric([self.job, self.hostname], round(self._stall_s, 3))
        total = Counter("gpusleuth_stalls", "stalls seen since the job started", labels=["job", "Hostname"])
        total.add_metric([self.job, self.hostname], self._stalls)
        return [since, stalled, open_s, total]

    def _step_families(self, Counter: type[CounterMetricFamily], Gauge: type[GaugeMetricFamily]) -> list[Metric]:
        t = self._steps
        labels = ["job", "rank", "Hostname"]
        fam: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "steps": Counter("gpusleuth_steps", "training steps completed", labels=labels),
            "step_s": Counter("gpusleuth_step_seconds", "wall time inside steps (rate / rate(steps) = mean step time)",
                              labels=labels),
            "wait_s": Counter("gpusleuth_data_wait_seconds", "time steps spent waiting for the next batch",
                              labels=labels),
            "opt_s": Counter("gpusleuth_optimizer_seconds", "time inside optimizer.step", labels=labels),
            "samples": Counter("gpusleuth_samples", "samples (batch rows) processed", labels=labels),
            "step_time": Gauge("gpusleuth_step_duration_seconds",
                               f"median step time over the last {WINDOW_STEPS} steps",
                               labels=labels),
            "wait_share": Gauge("gpusleuth_data_wait_ratio", "share of recent step time spent waiting for data",
                                labels=labels),
            "throughput": Gauge("gpusleuth_samples_per_second", "samples per second over the recent steps",
                                labels=labels),
            "phase": Counter("gpusleuth_phase_seconds", "time in named phases (eval, checkpoint, …)",
                             labels=[*labels, "phase"]),
        }
        for pid, count in t.counts.items():
            lv = [self.job, t.rank_labels.get(pid, "0"), self.hostname]
            fam["steps"].add_metric(lv, count)
            fam["step_s"].add_metric(lv, t.step_ns.get(pid, 0) / 1e9)
            fam["wait_s"].add_metric(lv, t.wait_ns.get(pid, 0) / 1e9)
            fam["opt_s"].add_metric(lv, t.optimizer_ns.get(pid, 0) / 1e9)
            fam["samples"].add_metric(lv, t.samples.get(pid, 0))
            step_s, wait_share, per_s = window_stats(t.steps[pid], t.phases)
            for key, value in (("step_time", step_s), ("wait_share", wait_share), ("throughput", per_s)):
                if value is not None:
                    fam[key].add_metric(lv, value)
        for (pid, phase), ns in t.phase_ns.items():
            fam["phase"].add_metric([self.job, t.rank_labels.get(pid, "0"), self.hostname, phase], ns / 1e9)
        return list(fam.values())

    def _gpu_families(self, Counter: type[CounterMetricFamily], Gauge: type[GaugeMetricFamily]) -> list[Metric]:
        labels = ["gpu", "UUID", "Hostname", "job"]
        # (family, column, scale): NVML percentages become ratios, MiB-free bytes stay bytes
        gauges = [
            (Gauge("gpusleuth_gpu_utilization_ratio",
                   "NVML utilization: share of time any kernel ran (not how busy the GPU was)", labels=labels),
             "util_gpu", 0.01),
            (Gauge("gpusleuth_gpu_sm_active_ratio",
                   "real activity: share of SM time with a warp resident (DCGM_FI_PROF_SM_ACTIVE)", labels=labels),
             "sm_active", 1.0),
            (Gauge("gpusleuth_gpu_tensor_active_ratio", "tensor-core pipe activity", labels=labels),
             "tensor_active", 1.0),
            (Gauge("gpusleuth_gpu_power_watts", "board power draw", labels=labels), "power_w", 1.0),
            (Gauge("gpusleuth_gpu_memory_used_bytes", "device memory used", labels=labels), "mem_used", 1.0),
            (Gauge("gpusleuth_gpu_memory_total_bytes", "device memory size", labels=labels), "mem_total", 1.0),
            (Gauge("gpusleuth_gpu_temperature_celsius", "GPU temperature", labels=labels), "temp_c", 1.0),
            (Gauge("gpusleuth_gpu_sm_clock_hertz", "SM clock", labels=labels), "sm_clock_mhz", 1e6),
        ]
        energy = Counter("gpusleuth_gpu_energy_joules", "energy since the driver loaded", labels=labels)
        for row in self._gpu_rows:
            index = row.get("gpu")
            if index is None:
                continue
            uuid = str(self.gpu_info.get(int(index), {}).get("uuid") or "")
            lv = [str(index), uuid, self.hostname, self.job]
            for fam, column, scale in gauges:
                value = row.get(column)
                if value is not None and _finite(value):
                    fam.add_metric(lv, float(value) * scale)
            if _finite(row.get("energy_j")):
                energy.add_metric(lv, float(row["energy_j"]))
        return [fam for fam, _, _ in gauges] + [energy]

    def _host_families(self, Gauge: type[GaugeMetricFamily]) -> list[Metric]:
        cpu = Gauge("gpusleuth_host_cpu_ratio", "host CPU busy share, all cores", labels=["Hostname", "job"])
        mem = Gauge("gpusleuth_host_memory_used_bytes", "host memory used", labels=["Hostname", "job"])
        row = self._host_row or {}
        if _finite(row.get("cpu_pct")):
            cpu.add_metric([self.hostname, self.job], float(row["cpu_pct"]) / 100)
        if _finite(row.get("mem_used")):
            mem.add_metric([self.hostname, self.job], float(row["mem_used"]))
        return [cpu, mem]


class QuietHandler(WSGIRequestHandler):
    timeout = IDLE_TIMEOUT_S  # StreamRequestHandler sets it on the socket: a silent client is dropped

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # one line per scrape into recorder.log is noise


class BoundedWSGIServer(WSGIServer):
    """A WSGI server with a real listen backlog, at most :data:`MAX_HANDLERS` connections in flight (one
    thread each, started only once a slot is free, so waiting connections cost no thread) and an idle
    timeout per connection."""

    request_queue_size = LISTEN_BACKLOG
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: Any) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self._slots = threading.BoundedSemaphore(MAX_HANDLERS)
        self._closing = False
        super().__init__(address, QuietHandler)
        self.set_app(app)

    def get_request(self) -> tuple[socket.socket, Any]:
        while not self._slots.acquire(timeout=0.25):  # every handler busy: leave it in the kernel's queue
            if self._closing:
                raise OSError("closing")
        try:
            return super().get_request()
        except BaseException:
            self._slots.release()
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            threading.Thread(target=self._handle, args=(request, client_address), daemon=True).start()
        except BaseException:
            self.shutdown_request(request)
            self._slots.release()
            raise

    def _handle(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - a client that hung up or went silent: nothing to say about it
            pass
        finally:
            self.shutdown_request(request)
            self._slots.release()

    def close(self) -> None:
        self._closing = True
        self.shutdown()
        self.server_close()
