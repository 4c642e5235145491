"""Gather the diagnosis-specific facts from a Run: phase statistics, the training loop's span, thread
evidence, host-op statistics of the profiler traces.

Why here and not in the rules: rules see only :class:`Facts` (numbers), so this is the single place
the diagnosis reads a Run's tables. ``report/build.py`` calls :func:`extra_facts` and passes the result
into ``Facts(...)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpusleuth.analysis import intervals as iv
from gpusleuth.analysis.comm import job_comm
from gpusleuth.analysis.outcomes import Outcomes, main_steps, step_durations
from gpusleuth.analysis.telemetry import HostSummary
from gpusleuth.diagnosis.facts import PhaseStats, Threads
from gpusleuth.run.model import Run

BUSY_WORKER_PCT = 50.0


def _phases(run: Run, pid: int | None, steps: int) -> dict[str, PhaseStats]:
    ph = run.phases
    if not len(ph):
        return {}
    sel = np.ones(len(ph), bool) if pid is None else (ph["pid"] == pid)
    main = main_steps(run)
    carved = step_durations(run)[0] if run.start_ns is not None and run.end_ns is not None else None
    out = {}
    for name in dict.fromkeys(ph["name"][sel].tolist()):
        m = sel & (ph["name"] == name)
        dur = np.maximum(ph["end_ns"][m] - ph["start_ns"][m], 0) / 1e9
        n = int(m.sum())
        stats = PhaseStats(name=str(name), count=n, total_s=float(dur.sum()),
                           mean_s=float(dur.mean()) if n else 0.0,
                           steps_between=(steps / n) if n and steps else None)
        if carved is not None:
            _after_penalty(main, carved, stats, ph["end_ns"][m].astype(np.int64))
        out[str(name)] = stats
    return out


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


def _loop_s(run: Run, pid: int | None) -> float | None:
    """First step start → last step end, less gpusleuth's own phases: gains are the job's throughput, so
    the seconds a --profile-steps export took must not dilute them."""
    st = run.steps
    if not len(st) or pid is None:
        return None
    m = st["pid"] == pid
    lo, hi = int(st["start_ns"][m].min()), int(st["end_ns"][m].max())
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


def _first_step(run: Run, pid: int | None) -> dict[str, float]:
    st = run.steps
    if not len(st) or pid is None:
        return {}
    m = np.flatnonzero(st["pid"] == pid)
    i = m[np.argmin(st["start_ns"][m])]
    return {"duration_s": max(int(st["end_ns"][i] - st["start_ns"][i]), 0) / 1e9,
            "data_wait_s": max(int(st["data_wait_ns"][i]), 0) / 1e9,
            "data_cpu_s": max(int(st["data_cpu_ns"][i]), 0) / 1e9}


def extra_facts(run: Run, outcomes: Outcomes, host: HostSummary | None, ranks: list[Any]) -> dict[str, Any]:
    """Keyword arguments for :class:`Facts` beyond the basic four."""
    from gpusleuth.analysis.host_ops import host_op_stats

    pid = outcomes.steps.pid
    rec = run.meta.get("recorder") or {}
    host_ops = []
    for prof in run.profiles:
        try:
            h = host_op_stats(prof)
        except Exception:  # a damaged trace must not take the whole report down; trace losses say why
            h = None
        if h:
            host_ops.append(h)
    return {
        "gpu_hw": list(rec.get("gpu") or []),
        "phases": _phases(run, pid, outcomes.steps.steps),
        "loop_s": _loop_s(run, pid),
        "threads": _threads(run, host, pid),
        "traces": list(ranks),
        "host_ops": host_ops,
        "first_step": _first_step(run, pid),
        "comm": job_comm(run, ranks),
        "hook_facts": [i for i in run.infos if i.get("kind") not in ("dataloader", "profiler_trace")],
    }
