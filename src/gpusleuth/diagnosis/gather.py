"""``build_facts(analysis) -> Facts``: the one constructor of what the rules see.

Why here and not in the rules: rules see only :class:`Facts` (numbers), so this is the single place the
diagnosis turns a :class:`~gpusleuth.analysis.bundle.RunAnalysis` into them — the analysis's summaries as
they are, plus the diagnosis-specific ones derived from its step view (phase statistics and after-costs,
the training loop's span, thread evidence, the first step). Any Run works: a recording, a trace read alone
(gains against its traced steps), or telemetry alone; each rule checks that its data is there.
"""

from __future__ import annotations

import numpy as np

from gpusleuth.analysis import intervals as iv
from gpusleuth.analysis.bundle import RunAnalysis
from gpusleuth.analysis.steps import ProcessSteps
from gpusleuth.analysis.telemetry import HostSummary
from gpusleuth.diagnosis.facts import Facts, PhaseStats, Threads
from gpusleuth.run.model import Run

BUSY_WORKER_PCT = 50.0


def _phases(run: Run, main: ProcessSteps | None, steps: int) -> dict[str, PhaseStats]:
    ph = run.phases
    if not len(ph):
        return {}
    pid = main.pid if main else None
    sel = np.ones(len(ph), bool) if pid is None else (ph["pid"] == pid)
    out = {}
    last_end = main.window[1] if main is not None and main.count else None
    for name in dict.fromkeys(ph["name"][sel].tolist()):
        named = sel & (ph["name"] == name)
        after = named & (ph["start_ns"] >= last_end) if last_end is not None else np.zeros(len(ph), bool)
        m = named & ~after  # in the training loop: from its start up to the last step's end
        dur = np.maximum(ph["end_ns"][m] - ph["start_ns"][m], 0) / 1e9
        n = int(m.sum())
        stats = PhaseStats(name=str(name), count=n, total_s=float(dur.sum()),
                           mean_s=float(dur.mean()) if n else 0.0,
                           steps_between=_steps_between(main, ph["start_ns"][named], steps) if n else None,
                           at_steps=_phase_steps(main, ph["start_ns"][m]),
                           after_loop_count=int(after.sum()),
                           after_loop_s=float(np.maximum(ph["end_ns"][after] - ph["start_ns"][after], 0).sum() / 1e9))
        if main is not None:
            _after_penalty(main.table, main.dur_ns, stats, ph["end_ns"][m].astype(np.int64))
        out[str(name)] = stats
    return out


#: occurrences inside the loop needed before a phase's cadence is stated: two intervals that a median can
#: read. One occurrence has no interval (chargpt samples and saves at iteration 0, then every 500: a
#: 200-iteration run sees it once, and "every 2 steps" was the distance from the loop's start); two have one
#: interval that may hold a start-of-training occurrence (iteration 0) beside the periodic one.
MIN_CADENCE = 3


def _phase_steps(main: ProcessSteps | None, starts: np.ndarray) -> list[int]:
    """The training steps (1-based: how many had ended) at which each occurrence of a phase started."""
    if main is None or not main.count:
        return []
    ends = np.sort(main.table["end_ns"].astype(np.int64))
    at = np.unique(np.searchsorted(ends, starts.astype(np.int64), side="right"))
    return [int(a) for a in at if a > 0]  # before the first step (a sanity check): not a cadence


def _steps_between(main: ProcessSteps | None, starts: np.ndarray, steps: int) -> float | None:
    """How many training steps the job runs between two occurrences of a phase: the median spacing of the
    steps at which they start, from :data:`MIN_CADENCE` occurrences on (None below: too few to tell).
    Counting occurrences instead (steps ÷ occurrences) is thrown off by the ones that are not part of the
    cadence: a final save or test after the loop beside the periodic ones (Lightning's step-20 checkpoints
    read "every 16 steps" with one extra save at the end), or an eval split into several phases at one
    step."""
    if main is None or not main.count:
        return steps / len(starts) if steps and len(starts) >= MIN_CADENCE else None
    at = _phase_steps(main, starts)
    if len(at) < MIN_CADENCE:
        return None
    return float(np.median(np.diff(at)))


def _batches_per_step(main: ProcessSteps | None) -> float | None:
    """Median DataLoader fetches per step over the steps that fetched (None without a loader)."""
    if main is None or not main.count or "fetches" not in main.table:
        return None
    f = main.table["fetches"]
    f = f[f > 0]
    return float(np.median(f)) if len(f) else None


MIN_AFTER = 3  # occurrences (and other steps) needed before a per-phase after-cost is measured


def _after_penalty(steps, dur: np.ndarray, stats: PhaseStats, phase_end: np.ndarray) -> None:
    """Fill ``stats.after_*``: how much longer the rest of the step right after each occurrence (phase time
    carved out: ``dur``, ns, one per row of ``steps``) was than the other steps."""
    if len(steps) < 2 * MIN_AFTER or len(phase_end) < MIN_AFTER:
        return
    starts, ends = steps["start_ns"].astype(np.int64), steps["end_ns"].astype(np.int64)
    # the step the phase ends in (its carved rest runs right after the phase), else the next one to start
    nxt = np.maximum(np.searchsorted(starts, phase_end, side="right") - 1, 0)
    nxt = np.where(ends[nxt] <= phase_end, nxt + 1, nxt)
    after = np.zeros(len(steps), bool)
    after[nxt[nxt < len(steps)]] = True
    after[0] = False  # the first step carries start-up, not a phase's after-cost
    others = ~after
    others[0] = False
    if after.sum() < MIN_AFTER or others.sum() < MIN_AFTER:
        return
    a, o = float(np.median(dur[after])) / 1e9, float(np.median(dur[others])) / 1e9
    stats.after_step_s, stats.other_step_s = a, o
    stats.after_penalty_s = max(a - o, 0.0) * int(after.sum())


TOOL_PHASE_PREFIX = "gpusleuth_"  # phases that are gpusleuth's own cost (profiler trace export)


def _loop_s(run: Run, main: ProcessSteps | None) -> float | None:
    """First step start → last step end, less gpusleuth's own phases: gains are the job's throughput, so
    the seconds a --profile-steps export took must not dilute them."""
    if main is None or not main.count:
        return None
    lo, hi = main.window
    ph = run.phases
    tool = 0
    if len(ph):
        own = np.array([str(n).startswith(TOOL_PHASE_PREFIX) for n in ph["name"]], bool)
        if own.any():
            s, e = iv.clip(ph["start_ns"][own], ph["end_ns"][own], lo, hi)
            us, ue = iv.union(s, e)
            tool = int((ue - us).sum())
    return (hi - lo - tool) / 1e9 if hi - lo - tool > 0 else None


def _threads(run: Run, host: HostSummary | None, pid: int | None) -> Threads:
    t = Threads()
    for info in run.infos:
        if info.get("kind") in ("dataloader", "torch_runtime") and info.get("torch_threads") is not None:
            if pid is None or info.get("pid") in (None, pid):
                t.torch_threads = int(info["torch_threads"])
    procs = run.procs
    if len(procs) and pid is not None and "num_threads" in procs:
        m = procs["pid"] == pid
        if m.any():
            v = procs["num_threads"][m].astype(float)
            v = v[np.isfinite(v)]
            t.main_os_threads = int(v.max()) if len(v) else None
    if host is not None:
        workers = [p for p in host.processes if p.role == "dataloader_worker" and p.cpu_pct]
        t.busy_workers = sum(1 for p in workers if p.cpu_pct["mean"] >= BUSY_WORKER_PCT)
        t.worker_cpu_cores = sum(p.cpu_pct["mean"] for p in workers) / 100.0
        t.main_cpu_cores = host.main_cpu_pct_mean / 100.0 if host.main_cpu_pct_mean is not None else None
    return t


def _first_step(main: ProcessSteps | None) -> dict[str, float]:
    if main is None or not main.count:
        return {}
    st, i = main.table, 0
    return {"duration_s": max(int(st["end_ns"][i] - st["start_ns"][i]), 0) / 1e9,
            "data_wait_s": max(int(st["data_wait_ns"][i]), 0) / 1e9,
            "data_cpu_s": max(int(st["data_cpu_ns"][i]), 0) / 1e9}


def _cpu_limit_cores(host: dict) -> float | None:
    """The tighter of the job's cgroup CPU quota (cpu.max) and its CPU affinity, in cores; None: no limit."""
    limits = [float(v) for v in (host.get("cgroup_cpu_limit_cores"), host.get("cpu_affinity_cores"))
              if isinstance(v, (int, float)) and v > 0]
    return min(limits) if limits else None


def build_facts(a: RunAnalysis) -> Facts:
    run, view = a.run, a.view
    pid = view.pid
    rec = run.meta.get("recorder") or {}
    basis = a.basis
    if basis is None:  # nothing to measure gains against: no steps, no traced device time
        from gpusleuth.analysis.outcomes import Outcomes, StepStats

        wall = run.wall_s or 0.0
        basis = Outcomes(wall_s=wall, startup_s=0.0, tail_s=0.0, time_share={}, time_s={}, steps=StepStats())
    loop_s = _loop_s(run, view.main) if a.recorded else (basis.steps.step_time_s or None)
    return Facts(
        outcomes=basis,
        gpus=a.gpus,
        host=a.host,
        gpu_note=a.gpu_note,
        dataloaders=[i for i in run.infos if i.get("kind") == "dataloader"],
        logical_cores=(rec.get("host") or {}).get("logical_cores"),
        cpu_limit_cores=_cpu_limit_cores(rec.get("host") or {}),
        gpu_hw=list(rec.get("gpu") or []),
        phases=_phases(run, view.main, basis.steps.steps),
        loop_s=loop_s,
        threads=_threads(run, a.host, pid),
        traces=list(a.traces),
        host_ops=list(a.host_ops),
        first_step=_first_step(view.main),
        batches_per_step=_batches_per_step(view.main),
        hook_facts=[i for i in run.infos if i.get("kind") not in ("dataloader", "profiler_trace")],
        dollars_per_second=a.dollars_per_second,
        recorded=a.recorded,
        gpu_timeline=list(a.gpu_timeline),
        comm=a.comm,
        load=a.load,
        requests=a.requests,
    )
