"""A day at 10 Hz on 8 GPUs: the recorder's memory and the run directory's growth, measured over minutes and
extrapolated.

The real :class:`~gpusleuth.recorder.process.TelemetryRecorder` (host, process-tree and GPU samplers, Arrow stream
writers) samples at the default 10 Hz for ``--minutes``, watching a real child process (a training-like loop
with 4 worker processes), flushing every second as ``run_loop`` does. NVML is the test suite's stand-in
(tests/test_nvml_sampler.py ``FakeNvml``) replaying ``tests/fixtures/nvml/h100_synthetic.json`` on 8 devices
— the only mock, at the hardware boundary; its values cycle through a few ticks, so Parquet's compression of
the GPU table is optimistic (the Arrow stream size, uncompressed, is the upper bound and is reported too).
Every ``--every`` seconds: this process's RSS (the recorder's own, plus the harness) and the run directory's
size. At the end the run is finalized to Parquet and both are extrapolated linearly to 24 h.

    python benchmarks/recorder_day.py --minutes 3
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

JOB = """
import multiprocessing as mp, time
def work(_):
    s = 0
    for i in range(20000):
        s += i * i
    return s
if __name__ == "__main__":
    with mp.Pool(4) as pool:
        end = time.time() + float(__import__("sys").argv[1])
        while time.time() < end:
            pool.map(work, range(8)); time.sleep(0.05)
"""


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def dir_mb(d: Path) -> float:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file()) / 1e6


class _Discard(list):
    def append(self, item):  # the stand-in's call log is test bookkeeping, not the recorder's memory
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--every", type=float, default=30.0)
    args = ap.parse_args()

    import test_nvml_sampler as T  # FakeNvml: pynvml's surface replaying a fixture

    from gpusleuth.recorder import nvml as nvml_mod
    from gpusleuth.recorder.process import GPU_PROCS_EVERY_S, TelemetryRecorder
    from gpusleuth.recorder.finalize import finalize_run_dir

    fx = T.load("h100_synthetic.json")
    dev = fx["devices"][0]
    fx["devices"] = [copy.deepcopy(dev) for _ in range(args.gpus)]
    for i, d in enumerate(fx["devices"]):
        d["static"]["uuid"] = f"GPU-{i:08d}"
        d["static"]["pci_bus_id"] = f"00000000:{i + 1:02X}:00.0"
    fake = T.FakeNvml(fx)
    fake.field_requests = _Discard()
    real_open = nvml_mod.NvmlSampler.open.__func__
    nvml_mod.NvmlSampler.open = classmethod(lambda cls, nvml=None, **kw: real_open(cls, fake, **kw))

    seconds = args.minutes * 60
    with tempfile.TemporaryDirectory(prefix="gpusleuth-day-") as td:
        run_dir = Path(td)
        job = subprocess.Popen([sys.executable, "-c", JOB, str(seconds + 5)], start_new_session=True,
                               stderr=subprocess.DEVNULL)
        rss0 = rss_mb()
        rec = TelemetryRecorder(run_dir, 0.1, use_gpu=True)
        rec.watch(job.pid)
        interval_ns = rec.interval_ns
        t0 = time.time_ns()
        next_ns, next_flush, next_procs, next_report = t0, t0 + 10**9, t0, t0
        i = 0
        points = []
        while True:
            now = time.time_ns()
            if now - t0 >= seconds * 1e9:
                break
            if now >= next_ns:
                fake.tick = i  # the stand-in holds its last reading after the fixture's ticks
                with_procs = now >= next_procs
                rec.sample_once(now, with_procs)
                if with_procs:
                    next_procs = now + int(GPU_PROCS_EVERY_S * 1e9)
                i += 1
                next_ns += interval_ns
            if now >= next_flush:
                rec.flush()
                next_flush += 10**9
            if now >= next_report:
                points.append(((now - t0) / 1e9, rss_mb(), dir_mb(run_dir)))
                print(f"  t={points[-1][0]:6.0f}s RSS {points[-1][1]:6.1f} MiB  run dir {points[-1][2]:7.2f} MB",
                      file=sys.stderr, flush=True)
                next_report += int(args.every * 1e9)
            time.sleep(max(0.0, min(next_ns, next_flush) - time.time_ns()) / 1e9)
        elapsed = (time.time_ns() - t0) / 1e9
        rec.close()
        os.killpg(job.pid, 9)  # the job and its pool workers
        job.wait()
        streams_mb = dir_mb(run_dir)
        peak_rss = rss_mb()
        points.append((elapsed, peak_rss, streams_mb))
        finalize_run_dir(run_dir, time.time_ns())
        parquet = {p.name: p.stat().st_size / 1e6 for p in run_dir.glob("*.parquet")}
        parquet_mb = dir_mb(run_dir)
    day = 86400 / elapsed
    # RSS growth: least-squares slope over the second half of the recording (start-up is not growth)
    import numpy as np

    half = [p for p in points[:-1] if p[0] >= elapsed / 2]
    slope = float(np.polyfit([p[0] for p in half], [p[1] for p in half], 1)[0]) if len(half) >= 2 else 0.0
    out = {
        "minutes": elapsed / 60, "gpus": args.gpus, "samples": i, "rate_hz": i / elapsed,
        "rss_mib_start": rss0, "rss_mib_end": peak_rss, "rss_points": [(round(t), round(r, 2)) for t, r, _ in points], "rss_slope_mib_per_h": slope * 3600,
        "rss_mib_24h_extrapolated": peak_rss + slope * (86400 - elapsed),
        "arrow_streams_mb": streams_mb, "parquet_mb": parquet_mb, "parquet_files_mb": parquet,
        "arrow_mb_per_day": streams_mb * day, "parquet_mb_per_day": parquet_mb * day,
        "parquet_mb_per_day_per_gpu": parquet_mb * day / args.gpus,
        "arrow_mb_per_day_per_gpu": streams_mb * day / args.gpus,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
