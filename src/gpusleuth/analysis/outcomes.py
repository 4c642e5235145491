"""Outcomes of a recorded run: steps, step time, throughput, and where the wall time went.

The wall-time partition is the headline of every report, so it is built to sum to exactly the wall
time: named phases (eval, checkpoint, …: their time is ``analysis/phases.py``'s, the step view's) first, then each step's exposed data wait and the rest of the
step ("compute": forward, backward, optimizer), then start-up before the first step; whatever is left —
gaps between steps outside any phase and the idle tail after the last step — is "other".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from gpusleuth.analysis.phases import phase_time
from gpusleuth.analysis.steps import ProcessSteps, StepView, robust_sigma, step_view
from gpusleuth.analysis.trace import TraceAnalysis
from gpusleuth.run.model import Run, Table


#: what a job's processes with steps are: one process, the ranks of a distributed job, or trainers side by side
#: without ranks (Hogwild)
Workers = Literal["single", "ranks", "trainers"]


@dataclass
class RankSteps:
    """One rank's steps, for the per-rank table of a distributed job."""

    pid: int
    rank: int | None
    steps: int
    warmup_steps: int
    step_time_p50_s: float | None  # steady steps
    step_time_mean_s: float | None
    data_wait_share: float | None
    samples_per_s: float | None  # steady


@dataclass
class StepStats:
    pid: int | None = None
    steps: int = 0
    delimiter: str | None = None
    step_time_p50_s: float | None = None
    step_time_p95_s: float | None = None
    step_time_mean_s: float | None = None
    step_time_cv: float | None = None
    samples: int | None = None
    samples_per_s: float | None = None  # over time spent in steps (phases excluded)
    data_wait_s: float = 0.0
    data_cpu_s: float = 0.0
    data_wait_share_of_steps: float = 0.0
    optimizer_s: float = 0.0
    step_time_s: float = 0.0  # sum of step durations with phase time carved out
    # the typical steady step, robust to a few preempted steps on a busy host and to the first optimizer
    # step's lazy state set-up (either can put a mean optimizer time above the median step): medians over
    # the steps after warm-up of the optimizer time and of the step less its input wait
    optimizer_p50_s: float | None = None
    body_p50_s: float | None = None
    gpu_time_s: float | None = None  # sum of CUDA-event step times where resolved
    # steps whose input wait was measured (a fetch, or a forward after the gap; docs/run-format.md
    # wait_source): 0 means "unmeasured", which reports must not show as a 0 % wait; None: not counted
    data_wait_measured_steps: int | None = None
    # the typical step's wait and the few that wait far longer (a loader's workers started again each epoch,
    # another loader's fetches): after the first step, the median exposed wait, and the steps whose wait is
    # above median + max(3 robust σ, 5 % of the median step) with their wait beyond the median (analysis
    # by robust statistics: a cause rests on what the typical step does, not on a mean two steps carry)
    # the steps gpusleuth's own instruments slowed (profiled, FLOP-counted), the first step aside: their count,
    # carved time, exposed wait and the CPU inside it — the input rules leave them out like the first step
    instrumented_steps: int = 0
    instrumented_s: float = 0.0
    instrumented_wait_s: float = 0.0
    instrumented_cpu_s: float = 0.0
    # steps whose optimizer evaluated its closure more than once (LBFGS' line search: analysis/structure.py)
    reevaluated_steps: int = 0
    fetching_steps: int | None = None  # steps that fetched from a DataLoader (or gpusleuth.watch); None: not counted
    data_wait_p50_s: float | None = None
    data_wait_spike_steps: int = 0
    data_wait_spike_s: float = 0.0
    other_processes_with_steps: list[int] = field(default_factory=list)
    # The job, when several ranks ran (torchrun, mp.spawn, one run per node): the numbers above are the
    # main rank's; these are every rank's and the job's throughput (sum over ranks' steady samples/s).
    world_size: int = 1
    workers: Workers = "single"  # what ``ranks`` holds: "ranks" of a distributed job, or "trainers" without ranks
    model_parallel: int = 1  # ranks that share one batch (tensor parallelism): the job's numbers count it once
    ranks: list[RankSteps] = field(default_factory=list)
    job_samples_per_s: float | None = None
    job_samples: int | None = None  # every rank's samples (the main rank's alone when one rank)


@dataclass
class Outcomes:
    wall_s: float
    startup_s: float
    tail_s: float
    time_share: dict[str, float]
    time_s: dict[str, float]
    steps: StepStats
    # the part of each phase's time (in time_s) that ran after the last step's end: a final evaluation,
    # test or save. It is after-training time — not the loop's, so no cadence gain is priced on it.
    after_training_s: dict[str, float] = field(default_factory=dict)


def _rank_stats(p: ProcessSteps) -> RankSteps:
    secs = p.seconds[p.steady]
    total = float(p.seconds.sum())
    return RankSteps(
        pid=p.pid, rank=p.rank, steps=p.count, warmup_steps=p.warmup,
        step_time_p50_s=float(np.median(secs)) if len(secs) else None,
        step_time_mean_s=float(secs.mean()) if len(secs) else None,
        data_wait_share=float(p.wait_ns.sum() / 1e9 / total) if total > 0 else None,
        samples_per_s=p.steady_samples_per_s(),
    )


SPIKES_MAX = 0.25  # long waits in more than this share of the steps are the loop's way of waiting, not a few
# steps (epoch boundaries are 1-2 steps an epoch: 10-20 % of a 10-step epoch; a Hogwild trainer on a busy host waited
# long in a third of its steps)


def _wait_spikes(stats: StepStats, dur: np.ndarray, wait: np.ndarray, measured: np.ndarray, steady: np.ndarray
                 ) -> None:
    """The typical wait and the spikes above it (see ``StepStats``), over the measured steps after the first,
    the steps gpusleuth's own instruments slowed (profiled, FLOP-counted) left out: theirs are not the job's."""
    keep = measured & steady
    keep[:1] = False
    if keep.sum() < 5:
        return
    w = wait[keep] / 1e9
    med = float(np.median(w))
    limit = med + max(3 * robust_sigma(w), 0.05 * float(np.median(dur[keep])) / 1e9)
    spikes = w > limit
    stats.data_wait_p50_s = med
    if spikes.sum() > SPIKES_MAX * len(w):
        return  # not a few steps but a wide spread (a third of the steps wait long): the mean is the wait
    stats.data_wait_spike_steps = int(spikes.sum())
    stats.data_wait_spike_s = float((w[spikes] - med).sum())


def compute_outcomes(run: Run, view: StepView | None = None) -> Outcomes:
    view = view if view is not None else step_view(run)
    if run.start_ns is None:
        raise ValueError("outcomes partition a recording's wall time: this run has no start (meta.json start_ns)")
    start = int(run.start_ns)
    end = int(run.end_ns if run.end_ns is not None else start)
    wall_ns = max(0, end - start)
    main = view.main
    steps = main.table if main else Table()
    stats = StepStats(pid=view.pid, other_processes_with_steps=view.other_pids, world_size=view.world_size,
                      ranks=[_rank_stats(p) for p in view.ranks] if len(view.ranks) > 1 else [])
    stats.workers = view.structure.workers
    stats.model_parallel = per_batch = view.structure.model_parallel  # ranks sharing a batch: counted once
    rates = [r.samples_per_s for r in stats.ranks if r.samples_per_s]
    if len(stats.ranks) > 1 and len(rates) == len(stats.ranks):
        stats.job_samples_per_s = float(sum(rates)) / per_batch
    if len(view.ranks) > 1:
        counted = [p.table["samples"][p.table["samples"] >= 0] for p in view.ranks]
        stats.job_samples = int(sum(k.sum() for k in counted)) // per_batch if any(len(k) for k in counted) else None

    phases = view.phases if (view.phases.lo, view.phases.hi) == (start, end) else phase_time(run.phases, start, end)
    phase_s = phases.ns()

    startup_ns = 0
    tail_ns = 0
    after_ns: dict[str, int] = {}
    data_ns = 0
    compute_ns = 0
    if main is not None and len(steps):
        s0 = np.clip(steps["start_ns"], start, end)
        e0 = np.clip(steps["end_ns"], start, end)
        dur, wait = main.dur_ns, main.wait_ns
        data_ns = int(wait.sum())
        compute_ns = int(dur.sum()) - data_ns
        first = int(s0.min())
        last = int(e0.max())
        startup_ns = (first - start) - phases.covered(start, first)
        tail_ns = (end - last) - phases.covered(last, end)
        after_ns = {k: v for k, v in phases.ns(max(last, start), end).items() if v > 0}

        stats.steps = len(steps)
        # what ends the job's steps: the last step's delimiter, a skipped update (GradScaler) aside
        delims = [str(d) for d in steps["delimiter"] if d != "skipped"]
        stats.delimiter = delims[-1] if delims else "optimizer"
        secs = dur / 1e9
        stats.step_time_p50_s = float(np.percentile(secs, 50))
        stats.step_time_p95_s = float(np.percentile(secs, 95))
        stats.step_time_mean_s = float(secs.mean())
        stats.step_time_cv = float(secs.std() / secs.mean()) if secs.mean() > 0 and len(secs) > 1 else None
        stats.step_time_s = float(dur.sum() / 1e9)
        stats.data_wait_s = data_ns / 1e9
        cpu = np.minimum(np.maximum(steps["data_cpu_ns"], 0), np.maximum(steps["data_wait_ns"], 0))
        stats.data_cpu_s = float(cpu.sum() / 1e9)
        stats.data_wait_share_of_steps = data_ns / dur.sum() if dur.sum() > 0 else 0.0
        stats.optimizer_s = float(np.maximum(steps["optimizer_ns"], 0).sum() / 1e9)
        keep = main.steady if main.steady.any() else np.ones(len(dur), bool)
        stats.optimizer_p50_s = float(np.median(np.maximum(steps["optimizer_ns"][keep], 0))) / 1e9
        stats.body_p50_s = float(np.median(dur[keep] - wait[keep])) / 1e9
        stats.data_wait_measured_steps = int((steps["data_wait_ns"] >= 0).sum())
        _wait_spikes(stats, dur, wait, steps["data_wait_ns"] >= 0, main.instrumented_mask())
        stats.fetching_steps = int((steps["fetches"] > 0).sum())
        stats.reevaluated_steps = view.structure.reevaluated_steps
        slowed = ~main.instrumented_mask()
        slowed[:1] = False
        stats.instrumented_steps = int(slowed.sum())
        stats.instrumented_s = float(dur[slowed].sum() / 1e9)
        stats.instrumented_wait_s = float(wait[slowed].sum() / 1e9)
        stats.instrumented_cpu_s = float(cpu[slowed].sum() / 1e9)
        known = steps["samples"] >= 0
        if known.any():
            stats.samples = int(steps["samples"][known].sum())
            t = dur[known].sum() / 1e9
            stats.samples_per_s = stats.samples / t if t > 0 else None
        g = steps["gpu_ns"]
        if (g >= 0).any():
            stats.gpu_time_s = float(g[g >= 0].sum() / 1e9)
    else:
        startup_ns = 0

    parts_ns = {"startup": startup_ns, "data_wait": data_ns, "compute": compute_ns}
    parts_ns.update(phase_s)
    other_ns = wall_ns - sum(parts_ns.values())
    parts_ns["other"] = max(other_ns, 0)
    denom = wall_ns or 1
    share = {k: v / denom for k, v in parts_ns.items()}
    if wall_ns == 0:
        share = {k: 0.0 for k in parts_ns}
    return Outcomes(
        wall_s=wall_ns / 1e9,
        startup_s=startup_ns / 1e9,
        tail_s=tail_ns / 1e9,
        after_training_s={k: v / 1e9 for k, v in after_ns.items()},
        time_share=share,
        time_s={k: v / 1e9 for k, v in parts_ns.items()},
        steps=stats,
    )


def traced_outcomes(traces: list[TraceAnalysis]) -> Outcomes | None:
    """The basis for gains when only profiler traces were read: the traced steps of the slowest rank (the
    job moves at its pace), or the trace window when the profiler marked no steps."""
    with_steps = [t for t in traces if t.steps]
    if with_steps:
        t = max(with_steps, key=lambda t: sum(s.duration_s for s in t.steps))
        secs = np.array([s.duration_s for s in t.steps], float)
        delimiter = "ProfilerStep"
    else:
        device = [t for t in traces if t.device_span_s > 0]
        if not device:
            return None
        t = max(device, key=lambda t: t.trace_window_s)
        secs = np.array([t.trace_window_s], float)
        delimiter = "trace window"
    wall = max(x.trace_window_s for x in traces)
    stats = StepStats(steps=len(secs), delimiter=delimiter, step_time_s=float(secs.sum()),
                      step_time_p50_s=float(np.median(secs)), step_time_mean_s=float(secs.mean()),
                      step_time_p95_s=float(np.percentile(secs, 95)),
                      world_size=max(len(traces), 1))
    return Outcomes(wall_s=max(wall, stats.step_time_s), startup_s=0.0, tail_s=0.0, time_share={}, time_s={},
                    steps=stats)
