"""The step view: every process's training steps, derived once per Run.

Why one object: the report, the facts, the headline, compare, sweep measurements and the live view all
need "the training steps" — which process is the training loop, which processes are ranks of the same job,
each step's duration with phase time carved out, its exposed data wait, how many leading steps are
warm-up, and the loop's window. Derived in several places, those answers drifted apart (three ways to
pick the main process, two warm-up rules, phase carving in some consumers and not others). They are
derived here, once, and everything downstream reads :class:`StepView`.

Definitions (documented in docs/outcomes.md):

- **Ranks of one job**: every process with steps whose launcher gave it a rank (``RANK``). Without ranks,
  the processes that train side by side (their steps overlapping the main process's: Hogwild trainers) are
  the job's workers; otherwise the main process alone.
- **Main process**: the lowest rank; without ranks, the process with the most steps.
- **Warm-up**: leading steps slower than median + max(3·MAD·1.4826, 5 % of the median), at most half the
  steps; a caller may ask for at least ``min_warmup`` (sweeps exclude a fixed number of steps), always
  keeping two steps to measure.
- **Instrumented steps**: steps gpusleuth itself slows by design are not steady (like warm-up; keeping two
  steps to measure): under ``--profile-steps A-B`` the profiler's warm-up step (A-1), the traced steps
  A..B and the one that exports the trace (B+1); and the one step the hook runs under FlopCounterMode for
  MFU. Throughput and step time are then the job's own, as its own clock reads them, not our tools'.
- **Stalled steps**: a step that sat through a stall the recorder's watch saw (it overlaps the stall and lasted
  at least the stall's threshold) is not steady either (keeping two steps): the pause is the ``hang``
  finding's, priced there, not a 15 s outlier in the job's step time.
- **Carved duration**: a step's wall time minus the time named phases (eval, checkpoint…) overlap it;
  **exposed data wait**: the step's data wait, at most its carved duration.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpusleuth.analysis import intervals as iv
from gpusleuth.analysis.phases import PhaseTime, phase_time
from gpusleuth.analysis.structure import StepStructure, step_structure
from gpusleuth.run.model import Run, Table, pick_main

MAD_SIGMA = 1.4826  # MAD → σ for normal data; the one robust-spread constant (noise, warm-up, outliers)


def robust_sigma(x: np.ndarray) -> float:
    """σ estimated from the median absolute deviation: outlier steps (a checkpoint's neighbour) barely move it."""
    if not len(x):
        return 0.0
    return MAD_SIGMA * float(np.median(np.abs(x - np.median(x))))


def warmup_count(durations_s: np.ndarray, min_warmup: int = 0) -> int:
    """Leading steps that are warm-up (see the module docstring)."""
    n_all = len(durations_s)
    n = 0
    if n_all >= 5:
        med = float(np.median(durations_s))
        limit = med + max(3 * robust_sigma(durations_s), 0.05 * med)
        while n < n_all // 2 and durations_s[n] > limit:
            n += 1
    return max(n, min(min_warmup, max(n_all - 2, 0)))


@dataclass
class ProcessSteps:
    """One process's steps, sorted by start, with their carved durations and exposed waits (ns)."""

    pid: int
    rank: int | None
    table: Table
    dur_ns: np.ndarray
    wait_ns: np.ndarray
    warmup: int
    instrumented: tuple[int, ...] = ()  # 0-based steps slowed by gpusleuth's own profiler or FLOP counter
    stalled: tuple[int, ...] = ()  # 0-based steps that sat through a stall (run/stalls.py)

    @property
    def count(self) -> int:
        return len(self.dur_ns)

    @property
    def window(self) -> tuple[int, int]:
        return int(self.table["start_ns"].min()), int(self.table["end_ns"].max())

    @property
    def seconds(self) -> np.ndarray:
        return self.dur_ns / 1e9

    def instrumented_mask(self) -> np.ndarray:
        """Boolean mask of the steps gpusleuth's own instruments did not slow (all steps, warm-up included)."""
        keep = np.ones(self.count, bool)
        keep[[i for i in self.instrumented if i < self.count]] = False
        return keep

    @property
    def steady(self) -> np.ndarray:
        """Boolean mask of the steps after warm-up."""
        keep = np.ones(self.count, bool)
        keep[: self.warmup] = False
        for left_out in (self.instrumented, self.stalled):
            if left_out:
                trial = keep.copy()
                trial[[i for i in left_out if i < self.count]] = False
                if trial.sum() >= 2:
                    keep = trial
        return keep

    def steady_samples_per_s(self) -> float | None:
        """Samples per second of step time over the steady steps whose batch size is known."""
        samples = self.table["samples"][self.steady]
        known = samples >= 0
        t = float(self.seconds[self.steady][known].sum())
        return float(samples[known].sum()) / t if known.any() and t > 0 else None

    def steady_tokens_per_s(self) -> float | None:
        """Tokens per second of step time over the steady steps whose batch showed its tokens (2-D ids)."""
        if "tokens" not in self.table:
            return None
        tokens = self.table["tokens"][self.steady]
        seen = tokens > 0
        t = float(self.seconds[self.steady][seen].sum())
        return float(tokens[seen].sum()) / t if seen.any() and t > 0 else None


@dataclass
class StepView:
    processes: list[ProcessSteps] = field(default_factory=list)  # every process with steps, by (rank, pid)
    main: ProcessSteps | None = None
    ranks: list[ProcessSteps] = field(default_factory=list)  # the processes that are ranks of the job
    world_size: int = 1  # declared by the launcher (WORLD_SIZE) when known, else the ranks seen
    # phase time over the run (analysis/phases.py): carved out of the steps here, the partition's phase parts
    phases: PhaseTime = field(default_factory=PhaseTime)
    # what the step model inferred (trainers, model parallelism, skipped updates…) and its doubts
    structure: StepStructure = field(default_factory=StepStructure)

    @property
    def pid(self) -> int | None:
        return self.main.pid if self.main else None

    @property
    def window(self) -> tuple[int, int] | None:
        return self.main.window if self.main else None

    @property
    def other_pids(self) -> list[int]:
        return [p.pid for p in self.processes if self.main is None or p.pid != self.main.pid]


def profiled_steps(run: Run) -> tuple[int, int] | None:
    """The steps ``--profile-steps A-B`` slowed (0-based, inclusive): A-1 (the profiler's warm-up) to B+1
    (the one that exports the trace); None when the run was not profiled or the range is unreadable."""
    text = run.meta.get("profile_steps") if isinstance(run.meta, dict) else None
    if not isinstance(text, str):
        return None
    a, _, b = text.strip().partition("-")
    try:
        lo, hi = int(a), int(b) if b else int(a)
    except ValueError:
        return None
    return (max(lo - 1, 0), hi + 1) if 0 <= lo <= hi else None


def flops_step(run: Run, pid: int) -> int | None:
    """The step the hook counted FLOPs in (under FlopCounterMode: slower by design), if any."""
    for info in run.infos:
        step = info.get("step")
        if info.get("kind") == "flops" and info.get("pid") == pid and isinstance(step, int):
            return step
    return None


def instrumented_steps(run: Run, pid: int) -> tuple[int, ...]:
    """Steps of ``pid`` that gpusleuth's own instruments slowed (see the module docstring)."""
    out = list(range(profiled[0], profiled[1] + 1)) if (profiled := profiled_steps(run)) else []
    counted = flops_step(run, pid)
    if counted is not None and counted >= 0:
        out.append(counted)
    return tuple(sorted(set(out)))


def stalled_steps(run: Run, table: Table) -> tuple[int, ...]:
    """Steps (0-based, in ``table``'s order) that sat through one of the run's stalls: overlapping it and at
    least its threshold long (the steps the hook had not yet written when the job stopped are short)."""
    if not run.stalls or not len(table):
        return ()
    s = np.asarray(table["start_ns"], dtype=np.int64)
    e = np.asarray(table["end_ns"], dtype=np.int64)
    hit = np.zeros(len(s), dtype=bool)
    for r in run.stalls:
        end = r.resumed_ns or r.ended_ns or r.seen_ns
        hit |= (s < end) & (e > r.since_ns) & (e - s >= int(r.threshold_s * 1e9))
    return tuple(int(i) for i in np.flatnonzero(hit))


def carve(start_ns: np.ndarray, end_ns: np.ndarray, data_wait_ns: np.ndarray, phases: PhaseTime
          ) -> tuple[np.ndarray, np.ndarray]:
    """Steps' carved durations and exposed data waits (ns; see the module docstring): the one carving, used
    by :func:`step_view` for the report and by the live window (``analysis/window.py``)."""
    dur = np.maximum(end_ns - start_ns - iv.overlap_each(start_ns, end_ns, phases.union_s, phases.union_e), 0)
    return dur, np.minimum(np.maximum(data_wait_ns, 0), dur)


def concurrent_trainers(processes: list[ProcessSteps], main: ProcessSteps) -> list[ProcessSteps]:
    """Without ranks, the processes that train side by side (Hogwild through ``torch.multiprocessing``, a
    launcher of its own): each with two or more steps, its steps' span overlapping the main process's. Any
    overlap counts — on a busy host two trainers started together can run nearly one after the other — and
    each trainer's rate is its own steps' (what its own clock reads), so the job's is their sum either way.
    Strictly one after another (a script that trains, then fine-tunes in a child) they are not one job's
    workers: the main process alone is the job then."""
    lo, hi = main.window
    out = [main]
    for p in processes:
        if p is main or p.count < 2:
            continue
        a, b = p.window
        if min(b, hi) > max(a, lo):
            out.append(p)
    return sorted(out, key=lambda p: p.pid) if len(out) > 1 else out


def step_view(run: Run, min_warmup: int = 0) -> StepView:
    view = StepView()
    st = run.steps
    start = run.start_ns
    end = run.end_ns
    if start is not None:
        view.phases = phase_time(run.phases, int(start), int(end if end is not None else start))
    if not len(st):
        return view
    pids, counts = np.unique(st["pid"], return_counts=True)
    rank_of = {pid: info.rank for pid, info in run.processes.items()}
    lo = int(start) if start is not None else int(st["start_ns"].min())
    hi = int(end) if end is not None else int(st["end_ns"].max())
    # ranks of one job move together (a rank's checkpoint stalls the others): every phase is carved out of every
    # rank's steps. Processes without ranks are independent loops (Hogwild trainers): each loses only its own
    # phases — another trainer's profiler export or FLOP count erased this one's steps (a 204 ms step carved
    # to 8 ms, its throughput +17 to +56 % against its clock)
    ranked_job = any(rank_of.get(int(pid)) is not None for pid in pids.tolist())
    for pid in pids.tolist():
        table = st.filter(st["pid"] == pid).sort_by("start_ns")
        s0 = np.clip(table["start_ns"], lo, hi)
        e0 = np.clip(table["end_ns"], lo, hi)
        own = view.phases if ranked_job or len(pids) == 1 or not len(run.phases) else \
            phase_time(run.phases.filter(run.phases["pid"] == pid), lo, hi)
        dur, wait = carve(s0, e0, table["data_wait_ns"], own)
        view.processes.append(ProcessSteps(pid=int(pid), rank=rank_of.get(int(pid)), table=table, dur_ns=dur,
                                           wait_ns=wait, warmup=warmup_count(dur / 1e9, min_warmup),
                                           instrumented=instrumented_steps(run, int(pid)),
                                           stalled=stalled_steps(run, table)))
    view.processes.sort(key=lambda p: (p.rank is None, p.rank if p.rank is not None else 0, p.pid))
    main_pid = pick_main([p.pid for p in view.processes], [p.count for p in view.processes],
                         [p.rank for p in view.processes])
    view.main = next(p for p in view.processes if p.pid == main_pid)
    ranked = [p for p in view.processes if p.rank is not None]
    view.ranks = ranked if ranked else concurrent_trainers(view.processes, view.main)
    sizes = [run.processes[p.pid].world_size for p in view.ranks if p.pid in run.processes]
    declared = [int(w) for w in sizes if w]
    view.world_size = max(declared + [len(view.ranks)])
    view.structure = step_structure(run.infos, view.main.pid, view.main.table, [p.pid for p in view.ranks],
                                    bool(ranked))
    return view


__all__ = ["ProcessSteps", "StepView", "carve", "concurrent_trainers", "step_view", "profiled_steps", "flops_step", "instrumented_steps", "warmup_count", "robust_sigma", "pick_main", "MAD_SIGMA"]
