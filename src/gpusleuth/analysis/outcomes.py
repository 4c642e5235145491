"""Outcomes of a recorded run: steps, step time, throughput, and where the wall time went.

The wall-time partition is the headline of every report, so it is built to sum to exactly the wall
time: named phases (eval, checkpoint, …) first, then each step's exposed data wait and the rest of the
step ("compute": forward, backward, optimizer), then start-up before the first step; whatever is left —
gaps between steps outside any phase and the idle tail after the last step — is "other".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpusleuth.analysis import intervals as iv
from gpusleuth.run.model import Run, Table


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
    gpu_time_s: float | None = None  # sum of CUDA-event step times where resolved
    # steps whose input wait was measured (a fetch, or a forward after the gap; docs/run-format.md
    # wait_source): 0 means "unmeasured", which reports must not show as a 0 % wait; None: not counted
    data_wait_measured_steps: int | None = None
    other_processes_with_steps: list[int] = field(default_factory=list)


@dataclass
class Outcomes:
    wall_s: float
    startup_s: float
    tail_s: float
    time_share: dict[str, float]
    time_s: dict[str, float]
    steps: StepStats


def main_step_process(steps: Table) -> tuple[int | None, list[int]]:
    """The process with the most steps is the training loop; others (more ranks…) are listed."""
    if not len(steps):
        return None, []
    pids, counts = np.unique(steps["pid"], return_counts=True)
    main = int(pids[np.argmax(counts)])
    return main, [int(p) for p in pids if p != main]


def main_steps(run: Run) -> Table:
    pid, _ = main_step_process(run.steps)
    if pid is None:
        return Table()
    return run.steps.filter(run.steps["pid"] == pid).sort_by("start_ns")


def phase_union(run: Run, lo: int, hi: int):
    if not len(run.phases):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    s, e = iv.clip(run.phases["start_ns"], run.phases["end_ns"], lo, hi)
    return iv.union(s, e)


def carve_phases(steps: Table, start: int, end: int, phase_s: np.ndarray, phase_e: np.ndarray):
    """Each step's duration with phase time carved out, and its exposed data wait (ns), within the run."""
    s0 = np.clip(steps["start_ns"], start, end)
    e0 = np.clip(steps["end_ns"], start, end)
    dur = np.maximum(e0 - s0 - iv.overlap_each(s0, e0, phase_s, phase_e), 0)
    wait = np.minimum(np.maximum(steps["data_wait_ns"], 0), dur)
    return dur, wait


def step_durations(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """The main process's steps, phases carved out: (durations, exposed data waits) in ns."""
    steps = main_steps(run)
    if not len(steps):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    start, end = int(run.start_ns), int(run.end_ns)
    return carve_phases(steps, start, end, *phase_union(run, start, end))


def compute_outcomes(run: Run) -> Outcomes:
    start = int(run.start_ns)
    end = int(run.end_ns if run.end_ns is not None else start)
    wall_ns = max(0, end - start)
    steps = main_steps(run)
    pid, others = main_step_process(run.steps)
    stats = StepStats(pid=pid, other_processes_with_steps=others)

    # Phases: each name's own union, then overall union for carving. Overlaps between different
    # names go to the phase that started first, so the partition still sums to the wall time.
    phase_s: dict[str, int] = {}
    covered_s = np.empty(0, np.int64)
    covered_e = np.empty(0, np.int64)
    if len(run.phases):
        order = np.argsort(run.phases["start_ns"], kind="stable")
        names = run.phases["name"][order]
        for name in dict.fromkeys(names.tolist()):
            sel = order[names == name]
            s, e = iv.clip(run.phases["start_ns"][sel], run.phases["end_ns"][sel], start, end)
            s, e = iv.union(s, e)
            already = int(iv.overlap_each(s, e, covered_s, covered_e).sum())
            phase_s[str(name)] = iv.total(s, e) - already
            covered_s, covered_e = iv.union(np.r_[covered_s, s], np.r_[covered_e, e])

    startup_ns = 0
    tail_ns = 0
    data_ns = 0
    compute_ns = 0
    if len(steps):
        s0 = np.clip(steps["start_ns"], start, end)
        e0 = np.clip(steps["end_ns"], start, end)
        dur, wait = carve_phases(steps, start, end, covered_s, covered_e)
        data_ns = int(wait.sum())
        compute_ns = int(dur.sum()) - data_ns
        first = int(s0.min())
        last = int(e0.max())
        startup_ns = (first - start) - int(iv.overlap_each(np.array([start]), np.array([first]), covered_s, covered_e)[0])
        tail_ns = (end - last) - int(iv.overlap_each(np.array([last]), np.array([end]), covered_s, covered_e)[0])

        stats.steps = len(steps)
        stats.delimiter = str(steps["delimiter"][-1])
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
        stats.data_wait_measured_steps = int((steps["data_wait_ns"] >= 0).sum())
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
        time_share=share,
        time_s={k: v / 1e9 for k, v in parts_ns.items()},
        steps=stats,
    )
