"""The recorder: a separate process that samples GPU and host telemetry into the run directory.

Why a separate process: the job can crash, be OOM-killed or SIGKILLed at any moment, and what was
recorded up to then must survive; and the recorder's own CPU cost must be measurable apart from the
job's and the launcher's. It runs in its own session so the terminal's Ctrl-C does not reach it: it keeps
recording while the job shuts down, and stops when the launcher says ``stop`` — or by itself once the
launcher is gone and the job has exited.

Protocol on stdin (from the launcher): ``pid <N>`` once the job has started, ``stop`` at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import signal
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, NoReturn, TypeVar

from gpusleuth.run.layout import RECORDER_STATUS

if TYPE_CHECKING:
    import pyarrow as pa

    from gpusleuth.recorder.exporter import LiveMetrics
    from gpusleuth.recorder.nvml import NvmlSampler
    from gpusleuth.recorder.procs import ProcessTreeSampler
    from gpusleuth.recorder.stallwatch import StallWatch

_T = TypeVar("_T")

FLUSH_EVERY_S = 0.5  # SIGKILL of the recorder loses at most this much (plus one tick)
GPU_PROCS_EVERY_S = 5.0
STATUS_FILE = RECORDER_STATUS


class TelemetryRecorder:
    def __init__(self, run_dir: Path, interval_s: float, use_gpu: bool = True, metrics: LiveMetrics | None = None,
                 stalls: StallWatch | None = None):
        from gpusleuth.recorder.host import HostSampler
        from gpusleuth.recorder.schemas import GPU_PROCS_SCHEMA, GPU_SCHEMA, HOST_SCHEMA, PROCS_SCHEMA
        from gpusleuth.run.layout import RunDir
        from gpusleuth.run.streams import TableStreamWriter

        self.run_dir = run_dir
        self.interval_ns = int(interval_s * 1e9)
        self.host = HostSampler()
        self.procs: ProcessTreeSampler | None = None
        self.child_pid: int | None = None
        self.gpu: NvmlSampler | None = None
        self.gpu_note: str | None = "GPU sampling disabled (--no-gpu)"
        if use_gpu:
            from gpusleuth.recorder.nvml import NvmlSampler

            self.gpu, self.gpu_note = NvmlSampler.open()

        def writer(name: str, schema: pa.Schema) -> TableStreamWriter:
            return TableStreamWriter(RunDir(run_dir).stream(name), schema)

        self.w_host = writer("host", HOST_SCHEMA)
        self.w_procs = writer("procs", PROCS_SCHEMA)
        self.w_gpu = writer("gpu", GPU_SCHEMA) if self.gpu else None
        self.w_gpu_procs = writer("gpu_procs", GPU_PROCS_SCHEMA) if self.gpu else None
        self.metrics = metrics  # recorder.exporter.LiveMetrics under --prometheus: fed each sample
        self.stalls = stalls  # recorder.stallwatch.StallWatch (None: --stall-after off): checked once a second
        self.samples = 0
        self.started_ns = time.time_ns()
        self.errors: dict[str, int] = {}
        # CPU spent starting up (imports, NVML init): reported apart so the steady sampling cost is visible.
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.init_cpu_s = usage.ru_utime + usage.ru_stime
        self.init_ns = time.time_ns()
        self._write_status(final=False)

    # -- status -------------------------------------------------------------------------------
    def _write_status(self, final: bool) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        status = {
            "pid": os.getpid(),
            "interval_s": self.interval_ns / 1e9,
            "gpu": self.gpu.hardware() if self.gpu else [],
            "gpu_note": self.gpu_note,
            # why GPU columns are empty (calls switched off, with NVML's answer) and how often calls failed
            "gpu_diagnostics": self._guard("nvml", self.gpu.diagnostics) if self.gpu else None,
            "host": self.host.hardware(),
            "samples": self.samples,
            "started_ns": self.started_ns,
            "stopped_ns": time.time_ns() if final else None,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "init_cpu_s": self.init_cpu_s,
            "init_ns": self.init_ns,
            "max_rss_kb": usage.ru_maxrss,
            "errors": self.errors,
        }
        if self.stalls is not None:
            status["stall_watch"] = self.stalls.status()
        if self.metrics is not None and self.metrics.address is not None:
            status["prometheus"] = "http://%s:%d/metrics" % self.metrics.address
        path = self.run_dir / STATUS_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(status, indent=2, default=str))
        os.replace(tmp, path)

    # -- sampling -----------------------------------------------------------------------------
    def watch(self, pid: int) -> None:
        from gpusleuth.recorder.procs import ProcessTreeSampler

        self.child_pid = pid
        self.procs = ProcessTreeSampler(pid)
        if self.stalls is not None:
            self.stalls.root = pid

    def _guard(self, what: str, fn: Callable[..., _T], *args: Any) -> _T | None:
        """A failing sampler must never stop the recording: count the failure and go on."""
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - telemetry is best effort, the loss is recorded
            key = f"{what}: {exc.__class__.__name__}: {exc}"[:200]
            self.errors[key] = self.errors.get(key, 0) + 1
            return None

    def sample_once(self, t_ns: int, with_gpu_procs: bool, final: bool = False) -> None:
        row = self._guard("host", self.host.sample, t_ns)
        if row:
            self.w_host.append(row)
            if self.metrics is not None:
                self.metrics.observe_host(row)
        if self.procs is not None:
            rows = self._guard("procs", self.procs.sample, t_ns)
            if rows:
                self.w_procs.extend(rows)
        if self.gpu is not None:
            rows = self._guard("gpu", self.gpu.sample, t_ns, final)
            if rows and self.w_gpu is not None:
                self.w_gpu.extend(rows)
                if self.metrics is not None:
                    self.metrics.observe_gpu(rows, self.gpu.hardware())
            if with_gpu_procs:
                rows = self._guard("gpu_procs", self.gpu.sample_processes, t_ns)
                if rows and self.w_gpu_procs is not None:
                    self.w_gpu_procs.extend(rows)
        if self.stalls is not None:
            self._guard("stall watch", self.stalls.tick, t_ns)
        self.samples += 1

    def flush(self) -> None:
        for w in (self.w_host, self.w_procs, self.w_gpu, self.w_gpu_procs):
            if w is not None:
                self._guard("write", w.flush)

    def close(self) -> None:
        if self.stalls is not None:
            self._guard("stall watch", self.stalls.close)
        for w in (self.w_host, self.w_procs, self.w_gpu, self.w_gpu_procs):
            if w is not None:
                self._guard("write", w.close)
        if self.gpu is not None:
            self._guard("nvml", self.gpu.close)
        if self.metrics is not None:
            self._guard("prometheus", self.metrics.close)
        self._write_status(final=True)


def _child_alive(pid: int | None) -> bool:
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by the launcher) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def run_loop(rec: TelemetryRecorder, control: IO[bytes] | None) -> None:
    """Sample on an absolute schedule (no drift), read control lines without blocking the schedule."""
    interval = rec.interval_ns
    next_t = time.time_ns()
    last_flush = time.monotonic()
    last_gpu_procs = 0.0
    eof = False
    buf = b""
    fd = control.fileno() if control is not None else None
    while True:
        now = time.time_ns()
        mono = time.monotonic()
        rec.sample_once(now, with_gpu_procs=mono - last_gpu_procs >= GPU_PROCS_EVERY_S)
        if mono - last_gpu_procs >= GPU_PROCS_EVERY_S:
            last_gpu_procs = mono
        if mono - last_flush >= FLUSH_EVERY_S:
            rec.flush()
            rec._write_status(final=False)
            last_flush = mono
        next_t += interval
        if next_t < time.time_ns():  # we fell behind (suspended machine…): skip, don't burst
            next_t = time.time_ns() + interval
        # Wait for the next tick, but wake for control input.
        while True:
            timeout = (next_t - time.time_ns()) / 1e9
            if timeout <= 0:
                break
            if fd is None or eof:
                time.sleep(timeout)
                break
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                eof = True
                continue
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                cmd = line.decode(errors="replace").split()
                if cmd[:1] == ["pid"] and len(cmd) == 2:
                    rec.watch(int(cmd[1]))
                elif cmd[:1] == ["stop"]:
                    # one last tick reading every field, the slow counters too, so energy ends with the run
                    rec.sample_once(time.time_ns(), with_gpu_procs=False, final=True)
                    return
        if eof and not _child_alive(rec.child_pid):
            # The launcher is gone and so is the job: nobody will say stop.
            return


def _serve_metrics(args: argparse.Namespace) -> LiveMetrics | None:
    """Start the /metrics listener before the first sample; a port already taken ends the recorder with
    a sentence in recorder.log (the launcher checked the port just before, so this is a lost race)."""
    from gpusleuth.recorder.exporter import LiveMetrics, parse_listen

    host, port = parse_listen(args.prometheus)
    metrics = LiveMetrics(args.run_dir, job=args.job or args.run_dir.name)
    try:
        metrics.serve(host, port)
    except OSError as exc:
        print(f"gpusleuth recorder: cannot serve Prometheus metrics on {host}:{port}: {exc.strerror or exc}",
              file=sys.stderr)
        return None
    return metrics


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpusleuth-recorder")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--no-gpu", action="store_true")
    parser.add_argument("--pid", type=int, default=None, help="watch this process tree from the start")
    parser.add_argument("--prometheus", default=None, metavar="[HOST:]PORT", help="serve live /metrics here")
    parser.add_argument("--job", default=None, help="the job label of the live metrics")
    parser.add_argument("--stall-after", default="auto", help="seconds without progress that make a stall; "
                        "auto: max(10 s, 5x the recent step time); off: no stall watch")
    parser.add_argument("--on-stall", choices=("dump", "kill"), default="dump")
    parser.add_argument("--say-fd", type=int, default=None, help="the launcher's stderr: the stall line goes here")
    args = parser.parse_args(argv)
    from gpusleuth.lean_imports import keep_pandas_out

    keep_pandas_out()
    # Terminal Ctrl-C is for the job; we stop on the launcher's word. SIGTERM ends us cleanly.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_term(signum: int, frame: object) -> NoReturn:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    metrics = _serve_metrics(args) if args.prometheus else None
    stalls = None
    if args.stall_after != "off":
        from gpusleuth.recorder.stallwatch import StallWatch

        stalls = StallWatch(args.run_dir, after_s=None if args.stall_after == "auto" else float(args.stall_after),
                            on_stall=args.on_stall, say_fd=args.say_fd, metrics=metrics)
    rec = TelemetryRecorder(args.run_dir, args.interval, use_gpu=not args.no_gpu, metrics=metrics, stalls=stalls)
    if args.pid:
        rec.watch(args.pid)
    try:
        run_loop(rec, sys.stdin.buffer)
    finally:
        rec.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
