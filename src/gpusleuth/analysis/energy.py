"""Energy per step and per sample from NVML's cumulative energy counter.

The counter (mJ since driver load, recorded as J) is read at 10 Hz by the recorder, so energy over any
interval is a difference of the counter interpolated at the interval's ends — no synchronize inside the
job, no per-step NVML call. A drop in the counter (driver reload) starts a new segment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpusleuth.analysis.steps import StepView
from gpusleuth.run.model import Run, Table


@dataclass
class Energy:
    gpus: int
    run_j: float  # whole run, all GPUs
    steps_j: float  # inside training steps, all GPUs
    per_step_j: float | None
    per_sample_j: float | None
    mean_power_w: float | None  # over the run, all GPUs
    method: str = "NVML total-energy counter, differenced (interpolated at step boundaries)"


def _monotone_counter(t: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ok = np.isfinite(e)
    t, e = t[ok], e[ok]
    if len(e) < 2:
        return t, e
    d = np.diff(e)
    d[d < 0] = 0.0  # a reset: skip the drop, keep counting from there
    return t, np.r_[0.0, np.cumsum(d)]


def counter_energy(t_ns: np.ndarray, energy_j: np.ndarray, lo: int, hi: int) -> float | None:
    """One device's energy (J) within [lo, hi] from its cumulative counter's samples: the counter made
    monotone across resets, interpolated at both ends (None with fewer than two readings)."""
    t, e = _monotone_counter(t_ns.astype(np.int64), energy_j.astype(float))
    if len(e) < 2:
        return None
    return float(np.interp(hi, t.astype(float), e) - np.interp(lo, t.astype(float), e))


def compute_energy(run: Run, view: StepView, gpus: list[int] | None = None) -> Energy | None:
    """Energy of the job's GPUs (``gpus``: their indices; default all sampled) over the run and inside the
    main rank's steps; per sample over the job's samples (every rank's), since every GPU's energy is
    counted. A MIG instance has no energy of its own (NVML meters the whole GPU): None for it."""
    g = run.gpu
    if not len(g) or "energy_j" not in g:
        return None
    if gpus is not None:
        g = g.filter(np.isin(g["gpu"], gpus))
        if not len(g):
            return None
    steps = view.main.table if view.main is not None else Table()
    run_j = 0.0
    steps_j = 0.0
    devices = np.unique(g["gpu"]).astype(int)
    for index in devices:
        sel = g["gpu"] == index
        t, e = _monotone_counter(g["t_ns"][sel].astype(np.int64), g["energy_j"][sel].astype(float))
        if len(e) < 2:
            continue
        run_j += float(e[-1] - e[0])
        if len(steps):
            ends = np.interp(steps["end_ns"].astype(float), t.astype(float), e)
            starts = np.interp(steps["start_ns"].astype(float), t.astype(float), e)
            steps_j += float((ends - starts).sum())
    if run_j == 0.0 and steps_j == 0.0:
        return None
    n_steps = len(steps)
    samples = sum(int(p.table["samples"][p.table["samples"] >= 0].sum()) for p in view.ranks) if n_steps else 0
    span = (g["t_ns"].max() - g["t_ns"].min()) / 1e9
    return Energy(
        gpus=len(devices),
        run_j=run_j,
        steps_j=steps_j,
        per_step_j=steps_j / n_steps if n_steps else None,
        per_sample_j=steps_j / samples if samples else None,
        mean_power_w=run_j / span if span > 0 else None,
    )
