"""Per-rank analysis of a Kineto trace: ``analyze_trace(run) -> TraceAnalysis``.

Facts only (no advice): the HTA-comparable device split, the per-step exposed-time partition with idle
causes, kernel breakdown, launch statistics, communication/computation overlap, step-time variance and
data issues. ``TraceAnalysis.to_dict()`` is the rank's entry in the report JSON's ``"ranks"`` list.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, Literal

import numpy as np

from gpusleuth.analysis.peaks import DTYPES, lookup_peak
from gpusleuth.run.model import Run

from . import kernels, launch, quality, segments as _segments, timeline
from .copy_calls import CopyCalls, copy_calls
from .gaps import GapHistogram, gap_histogram
from .kernels import KernelBreakdown
from .launch import LaunchStats
from .prep import ALL_CATS, DEVICE_CATS, IDLE_CATS, prepare
from .segments import Segments
from .timeline import CommOverlap, DeviceTime

__all__ = ["analyze_trace", "TraceAnalysis", "StepPartition", "TraceStepStats", "StepOutlier", "IdleCauses",
           "ALL_CATS", "DEVICE_CATS", "IDLE_CATS"]


@dataclass(frozen=True)
class StepPartition:
    """One ``ProfilerStep#N`` window and its exposed-time partition (sums exactly to ``duration_s``)."""

    step: int
    start_s: float  # from the trace window's start
    duration_s: float
    partition: dict[str, float]  # seconds per category in ALL_CATS; categories with none left out
    comm_overlapped_s: float  # communication hidden under compute (not in the partition)


@dataclass(frozen=True)
class StepOutlier:
    step: int
    duration_s: float
    vs_median: float | None


@dataclass(frozen=True)
class TraceStepStats:
    """Spread of the traced step times (the floats are None without steps)."""

    count: int
    mean_s: float | None = None
    median_s: float | None = None
    std_s: float | None = None
    cv: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    outliers: list[StepOutlier] = field(default_factory=list)


@dataclass(frozen=True)
class IdleCauses:
    """The idle categories summed over the steps (``over == "steps"``) or, without steps, the device span."""

    total_s: float
    seconds: dict[str, float]  # every category of IDLE_CATS
    share: dict[str, float]  # of total_s, every category of IDLE_CATS
    over: Literal["steps", "device_span"]


@dataclass(frozen=True)
class TraceAnalysis:
    rank: int | None
    label: str
    device: str | None
    device_span_s: float
    compute: float
    non_compute: float
    idle: float
    device_time: DeviceTime
    span_partition: dict[str, float]
    trace_window_s: float
    trace_partition: dict[str, float]
    steps: list[StepPartition]
    step_stats: TraceStepStats
    idle_causes: IdleCauses
    kernels: KernelBreakdown
    launch: LaunchStats
    overlap: CommOverlap
    # host time inside the calls that launched host-to-device copies (a pageable copy blocks its caller)
    copy_calls: CopyCalls = field(default_factory=lambda: CopyCalls(0.0, 0.0, 0.0, 0))
    # the device's dense peaks by dtype (TFLOP/s) from the peak table, and where they come from ({} and None
    # for a device the table does not list): what a precision change can give at most
    peak_tflops: dict[str, float] = field(default_factory=dict)
    peak_source: str | None = None
    issues: list[str] = field(default_factory=list)
    losses: list[str] = field(default_factory=list)
    # no kernels, copies or sets: a CPU profile, whose partition is host time (ops, Python), not device idle
    cpu_only: bool = False
    # Where each partition category lies in time (for annotated traces and gap histograms); not part
    # of the JSON contract — a long trace has far too many intervals for a report.
    segments: Segments | None = field(default=None, repr=False, compare=False)
    origin_ns: int | None = None  # absolute time of the segments' zero (the trace's origin)
    # the idle-gap size histogram (HTML report), small, computed from the segments (analysis/trace/gaps.py)
    gap_histogram: GapHistogram | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The rank's entry in the report JSON's ``"ranks"`` list (docs/report-json.md)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name not in _NOT_IN_JSON}

    def portable(self) -> "TraceAnalysis":
        """This analysis without its segments: what travels back from a worker process (a few kB, where the
        segments of a long trace are megabytes). Everything but ``--annotate`` works from it."""
        return replace(self, segments=None)


_NOT_IN_JSON = ("segments", "origin_ns", "gap_histogram")


def _plain(x: Any) -> Any:
    """JSON-safe copy: dataclasses → dicts (field order), numpy scalars → Python, NaN/inf → None."""
    if is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in fields(x)}
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x


def _step_stats(steps: list[StepPartition]) -> TraceStepStats:
    """Spread of step times and robust outliers (median ± 3.5 scaled MADs, and ≥10 % off the median)."""
    d = np.array([s.duration_s for s in steps], float)
    if len(d) == 0:
        return TraceStepStats(count=0)
    med = float(np.median(d))
    mad = float(np.median(np.abs(d - med))) * 1.4826
    out = []
    if len(d) >= 3:
        z = np.abs(d - med) / mad if mad > 0 else np.zeros_like(d)
        far = np.abs(d - med) > 0.1 * med
        out = [StepOutlier(step=steps[i].step, duration_s=float(d[i]), vs_median=float(d[i] / med) if med else None)
               for i in np.flatnonzero((z > 3.5) & far).tolist()]
    return TraceStepStats(count=int(len(d)), mean_s=float(d.mean()), median_s=med, std_s=float(d.std()),
                     cv=float(d.std() / d.mean()) if d.mean() > 0 else None, min_s=float(d.min()),
                     max_s=float(d.max()), outliers=out)


def _idle_causes(part: dict[str, float], over: Literal["steps", "device_span"]) -> IdleCauses:
    idle = {c: part.get(c, 0.0) for c in IDLE_CATS}
    tot = sum(idle.values())
    return IdleCauses(total_s=tot, seconds=idle, share={c: (v / tot if tot else 0.0) for c, v in idle.items()},
                      over=over)


def analyze_trace(run: Run) -> TraceAnalysis:
    tr = run.trace
    if tr is None:
        raise ValueError("analyze_trace: this Run holds no profiler trace")
    p = prepare(tr)
    tl = timeline.build(p)
    split = timeline.device_split(tl)
    issues = quality.find_issues(p)
    # per-step partition (ProfilerStep windows; the last step is kept — see docs)
    steps: list[StepPartition] = []
    if len(p.step_num):
        parts = timeline.partition(tl, p.step_start, p.step_end)
        hidden = timeline.overlapped_comm(tl, p.step_start, p.step_end)
        for i, num in enumerate(p.step_num.tolist()):
            row = parts[i]
            steps.append(StepPartition(
                step=int(num),
                start_s=(int(p.step_start[i]) - tl.lo) / 1e9,
                duration_s=int(p.step_end[i] - p.step_start[i]) / 1e9,
                partition={c: int(v) / 1e9 for c, v in zip(ALL_CATS, row) if v},
                comm_overlapped_s=int(hidden[i]) / 1e9,
            ))
    else:
        issues.append("no ProfilerStep#N annotations (profiled without prof.step()): per-step partition "
                      "unavailable; the whole-trace partition covers the same categories")
    whole = timeline.partition(tl, np.array([tl.lo]), np.array([tl.hi]))[0]
    trace_part = {c: int(v) / 1e9 for c, v in zip(ALL_CATS, whole) if v}
    # idle causes over the steps when there are steps, else over the device span
    if steps:
        agg: dict[str, float] = {}
        for s in steps:
            for c, v in s.partition.items():
                agg[c] = agg.get(c, 0.0) + v
        causes = _idle_causes(agg, "steps")
    else:
        causes = _idle_causes(split.span_partition, "device_span")
    meta = run.meta
    seg = _segments.runs(tl.bounds, tl.label)
    device = meta.get("device")
    peaks = {d: pk for d in DTYPES if (pk := lookup_peak(device, d)) is not None}
    return TraceAnalysis(
        rank=meta.get("rank"), label=str(meta.get("label", "")), device=meta.get("device"),
        device_span_s=split.device_span_s, compute=split.compute, non_compute=split.non_compute,
        idle=split.idle, device_time=split.time, span_partition=split.span_partition,
        trace_window_s=(tl.hi - tl.lo) / 1e9, trace_partition=trace_part,
        steps=steps, step_stats=_step_stats(steps), idle_causes=causes,
        kernels=kernels.breakdown(p), launch=launch.launch_stats(p), overlap=timeline.comm_overlap(tl),
        copy_calls=copy_calls(p, tl.lo, tl.hi),
        peak_tflops={d: pk.tflops for d, pk in peaks.items()},
        peak_source=next((f"{pk.model}, {pk.source}" for pk in peaks.values()), None),
        issues=issues, losses=list(run.losses), cpu_only=bool(p.n == 0 and len(tr.events)),
        segments=seg, origin_ns=tr.origin_ns, gap_histogram=gap_histogram(seg, str(meta.get("label", ""))),
    )
