"""What the recorded server's telemetry says about one stretch of a load (a level, or all of them): the
accelerator's busy share and energy, the server's CPU and the host's.

Apart from ``serving/analysis/load.py``, which reads the load's own rows, because this reads the other tables of
the run — NVML samples and the process sampler — through the analysis layer's own rules (``counter_energy``,
``cores_by_process``); a level's numbers are the two put together.
"""

from __future__ import annotations

import numpy as np

from gpusleuth.analysis.energy import counter_energy
from gpusleuth.analysis.host_telemetry import cores_by_process
from gpusleuth.analysis.telemetry import gpu_busy_in
from gpusleuth.run.model import Run

COUNTER_REACH_NS = 5_000_000_000  # energy-counter readings this far outside a level still bound it
ENERGY_COUNTER = "NVML energy counter"
POWER_INTEGRAL = "NVML power, integrated"


def gpu_in(run: Run, lo: int, hi: int) -> tuple[float | None, float | None, str | None]:
    """Mean utilization (0..1, over devices), the GPUs' energy (J, every recorded device) within [lo, hi] and
    where it came from: NVML's energy counter (a reset starts a new segment), else the power samples
    integrated (a GPU without the counter), "mixed" when devices differed."""
    g = run.gpu
    if not len(g) or "t_ns" not in g:
        return None, None, None
    t = g["t_ns"].astype(np.int64)
    inside = (t >= lo) & (t <= hi)
    busy = gpu_busy_in(g, lo, hi)
    devices = g["gpu"] if "gpu" in g else np.zeros(len(g), np.int64)
    total, sources = 0.0, set()
    for d in np.unique(devices[inside]):
        # the counter's readings on both sides of the level (interpolated at its ends), its power inside it
        near = (devices == d) & (t >= lo - COUNTER_REACH_NS) & (t <= hi + COUNTER_REACH_NS)
        e = g["energy_j"][near].astype(np.float64) if "energy_j" in g else np.zeros(0)
        if np.isfinite(e).sum() >= 2:
            j = counter_energy(t[near][np.isfinite(e)], e[np.isfinite(e)], lo, hi)
            if j is not None:
                total += j
                sources.add(ENERGY_COUNTER)
                continue
        m = inside & (devices == d)
        pw = g["power_w"][m].astype(np.float64) if "power_w" in g else np.zeros(0)
        keep = np.isfinite(pw)
        if keep.sum() >= 2:
            tt, pw = t[m][keep] / 1e9, pw[keep]
            total += float(np.sum((pw[1:] + pw[:-1]) / 2 * np.diff(tt)))
            sources.add(POWER_INTEGRAL)
    if not sources:
        return busy, None, None
    return busy, total, next(iter(sources)) if len(sources) == 1 else "mixed"


def cpu_in(run: Run, lo: int, hi: int) -> tuple[float | None, float | None, float | None]:
    """(server cores, busiest server process cores, host CPU share) over [lo, hi]: the server is every process of
    the job's tree (:func:`cores_by_process`); the host, its samples within the window."""
    server = top = host = None
    got = cores_by_process(run.procs, (lo, hi))
    if got is not None:
        server, top = got.mean, got.busiest
    h = run.host
    if len(h) and {"t_ns", "cpu_pct"} <= set(h.columns):
        t = h["t_ns"].astype(np.int64)
        cpu = h["cpu_pct"].astype(np.float64)
        m = (t >= lo) & (t <= hi) & np.isfinite(cpu)
        host = float(cpu[m].mean()) / 100.0 if m.any() else None
    return server, top, host
