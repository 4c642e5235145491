"""Utilization over time, per GPU and across GPUs: what the seeds' ``nvidia-smi -l 1`` flow reads by eye.

``summarize_gpus`` (telemetry.py) gives distributions; this module adds the *time* view a GPU log alone
supports: how much of the capture each GPU sat idle (and in how many stretches), how bursty it was,
which of the util × memory-util × memory-used patterns it spent its time in, power against
utilization, the GPU-hours it represents, and the imbalance across GPUs. Each sample stands for the time
until the next one, capped at the usual interval so a sampler gap never counts as idle or busy time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpusleuth.run.model import Run, Table
from gpusleuth.run.gaps import sampler_gaps
from gpusleuth.run.records import GpuHardware

IDLE_UTIL = 5.0  # % utilization.gpu at or below which a sample is idle
BUSY_UTIL = 50.0
HIGH_MEM_UTIL = 50.0  # memory-controller utilization that marks a bandwidth-heavy sample
HOLDING_MEM = 0.10  # share of device memory in use that means a process holds the GPU
STRETCH_MIN_S = 10.0  # an idle stretch shorter than this is a pause, not a stretch
# the four patterns of util × memory-util × memory-used
PATTERNS = ("idle_empty", "idle_holding_memory", "partial", "busy_compute", "busy_memory_bound")


@dataclass
class Utilization:
    """utilization.gpu over the time the samples cover, time-weighted."""

    mean: float
    std: float
    idle_share: float  # of covered time, utilization ≤ IDLE_UTIL
    busy_share: float  # utilization ≥ BUSY_UTIL


@dataclass
class GpuTimeline:
    index: int
    covered_s: float  # time the samples stand for (sampler gaps excluded)
    span_s: float  # first to last sample
    gap_s: float  # time lost to sampler gaps
    gaps: int
    interval_s: float
    util: Utilization | None  # None: no sample had a utilization reading (a power-only log)
    idle_stretches: int = 0  # idle runs of ≥ STRETCH_MIN_S
    longest_idle_s: float = 0.0
    bursts: int = 0  # idle → busy transitions
    patterns: dict[str, float] = field(default_factory=dict)  # share of covered time per pattern
    busy_power_share_of_limit: float | None = None  # mean power while ≥ 80 % utilized ÷ power limit
    idle_gpu_hours: float = 0.0
    gpu_hours: float = 0.0


def gpu_timelines(run: Run) -> list[GpuTimeline]:
    g = run.gpu
    if not len(g) or "util_gpu" not in g:
        return []
    hw = {int(d.get("index", i)): d for i, d in enumerate((run.meta.get("recorder") or {}).get("gpu") or [])}
    out = []
    for index in np.unique(g["gpu"]).astype(int):
        m = g["gpu"] == index
        t = g["t_ns"][m].astype(np.int64)
        util = g["util_gpu"][m].astype(float)
        out.append(_one(int(index), t, util, _col(g, "util_mem", m), _col(g, "mem_used", m),
                        _col(g, "mem_total", m), _col(g, "power_w", m), hw.get(int(index), {})))
    return out


def _col(g: Table, name: str, m: np.ndarray) -> np.ndarray:
    return g[name][m].astype(float) if name in g else np.full(int(m.sum()), np.nan)


def _one(index: int, t: np.ndarray, util: np.ndarray, util_mem: np.ndarray, mem_used: np.ndarray,
         mem_total: np.ndarray, power: np.ndarray, hw: GpuHardware) -> GpuTimeline:
    med, gaps = sampler_gaps(t)
    if len(t) >= 2:
        dt = np.diff(t) / 1e9
        cap = med if np.isfinite(med) else float(np.median(dt))
        w = np.append(np.minimum(dt, cap), cap)  # the last sample stands for one usual interval
    else:
        w = np.ones(len(t))
        med = float("nan")
    ok = np.isfinite(util)
    w_ok = np.where(ok, w, 0.0)
    covered = float(w_ok.sum())
    span = (t[-1] - t[0]) / 1e9 if len(t) else 0.0
    tl = GpuTimeline(index=index, covered_s=covered, span_s=span, gap_s=float(sum(s for _, s in gaps)),
                     gaps=len(gaps), interval_s=med, util=None)
    if covered <= 0:
        return tl
    u = np.where(ok, util, 0.0)
    mean = float((u * w_ok).sum() / covered)
    idle = ok & (util <= IDLE_UTIL)
    busy = ok & (util >= BUSY_UTIL)
    tl.util = Utilization(mean=mean, std=float(np.sqrt(((u - mean) ** 2 * w_ok).sum() / covered)),
                          idle_share=float(w[idle].sum() / covered), busy_share=float(w[busy].sum() / covered))
    # idle stretches: consecutive idle samples with no sampler gap between them
    gap_after = np.zeros(len(t), bool)
    if len(t) >= 2 and np.isfinite(med):
        gap_after[:-1] = np.diff(t) / 1e9 > max(2.5 * med, med + 1.5)
    lengths = _runs(idle, gap_after, w)
    long = [x for x in lengths if x >= STRETCH_MIN_S]
    tl.idle_stretches = len(long)
    tl.longest_idle_s = float(max(lengths)) if lengths else 0.0
    tl.bursts = int((idle[:-1] & busy[1:]).sum()) if len(t) >= 2 else 0
    total = float(np.nanmax(mem_total)) if np.isfinite(mem_total).any() else float(hw.get("mem_total_mib") or 0) * 2**20
    share = mem_used / total if total else np.full(len(t), np.nan)
    holding = np.isfinite(share) & (share >= HOLDING_MEM)
    bw = np.isfinite(util_mem) & (util_mem >= HIGH_MEM_UTIL)
    masks = {
        "idle_empty": idle & ~holding,
        "idle_holding_memory": idle & holding,
        "partial": ok & ~idle & ~busy,
        "busy_compute": busy & ~bw,
        "busy_memory_bound": busy & bw,
    }
    tl.patterns = {k: float(w[v].sum() / covered) for k, v in masks.items()}
    limit = hw.get("power_limit_w")
    very_busy = ok & (util >= 80) & np.isfinite(power)
    if limit and very_busy.any():
        tl.busy_power_share_of_limit = float(np.average(power[very_busy], weights=w[very_busy]) / limit)
    tl.gpu_hours = covered / 3600
    tl.idle_gpu_hours = tl.util.idle_share * covered / 3600
    return tl


def _runs(mask: np.ndarray, break_after: np.ndarray, w: np.ndarray) -> list[float]:
    """Lengths (s) of runs of True in ``mask``, broken also where ``break_after`` marks a gap."""
    out, cur = [], 0.0
    for on, brk, wi in zip(mask, break_after, w):
        if on:
            cur += wi
        if (not on or brk) and cur:
            out.append(cur)
            cur = 0.0
    if cur:
        out.append(cur)
    return out
