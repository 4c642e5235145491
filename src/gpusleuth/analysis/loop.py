"""The training loop as the rules see it: its phases (how often, how long, what they leave behind in the next
step), its span less gpusleuth's own phases, the thread evidence, the first step and the batches per step —
computed once here, from the Run and its step view, and carried in ``RunAnalysis.loop``.

The rules read ``PhaseStats`` (occurrences of the training process's phases: how many, how long each, how
often); the time phases take out of the wall time and the steps is ``analysis/phases.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import numpy as np

from gpusleuth.analysis.phases import phase_time
from gpusleuth.analysis.steps import ProcessSteps, StepView
from gpusleuth.analysis.host_telemetry import HostSummary
from gpusleuth.run.model import Run, Table
# the records the loop facts carry, named for the diagnosis (which sees no Run module) through this one
from gpusleuth.run.records import GpuHardware as GpuHardware, LoaderConfig as LoaderConfig
from gpusleuth.run.records import HostHardware, loader_config


@dataclass
class PhaseStats:
    """One named phase of the training process (``eval``, ``checkpoint``, ``logging``…)."""

    name: str
    count: int
    total_s: float
    mean_s: float
    # training steps per occurrence (how often it runs); None under MIN_CADENCE occurrences
    steps_between: float | None = None
    # The cost a phase leaves behind in the step right after it (caches and allocator cold after a
    # checkpoint's serialization, page-cache writeback, mode switches after eval): the median of those
    # steps minus the median of the other steps, times the occurrences; 0 when not measurable or negative.
    after_penalty_s: float = 0.0
    after_step_s: float | None = None  # median step right after the phase
    other_step_s: float | None = None  # median of the other steps
    # Occurrences that start after the last training step (a final evaluation, the last save, a test
    # run): after-training time, left out of count/total_s/mean_s — running them less often saves nothing
    after_loop_count: int = 0
    after_loop_s: float = 0.0
    at_steps: list[int] = field(default_factory=list)  # the step each occurrence in the loop started at


@dataclass
class Threads:
    """Thread evidence for CPU oversubscription: what the job asked for and what the OS saw."""

    torch_threads: int | None = None  # torch.get_num_threads() in the training process (hook)
    main_os_threads: int | None = None  # peak OS threads of the training process (process sampler)
    busy_workers: int = 0  # DataLoader workers that averaged ≥ 50 % of a core
    worker_cpu_cores: float = 0.0  # sum over workers of their mean CPU, in cores
    main_cpu_cores: float | None = None  # training process mean CPU, in cores


BUSY_WORKER_PCT = 50.0


def phase_stats(run: Run, main: ProcessSteps | None, steps: int) -> dict[str, PhaseStats]:
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


#: occurrences needed before a phase's cadence is stated: two intervals that a median can read. One
#: occurrence has no interval (chargpt samples and saves at iteration 0, then every 500: a 200-iteration run
#: sees it once, and "every 2 steps" was the distance from the loop's start to it); two have one interval,
#: which may join a start-of-training occurrence (iteration 0) to the first periodic one.
MIN_CADENCE = 3


def _phase_steps(main: ProcessSteps | None, starts: np.ndarray) -> list[int]:
    """The training steps (1-based: how many had ended) at which the occurrences of a phase started."""
    if main is None or not main.count:
        return []
    ends = np.sort(main.table["end_ns"].astype(np.int64))
    at = np.unique(np.searchsorted(ends, starts.astype(np.int64), side="right"))
    return [int(a) for a in at if a > 0]  # before the first step (a sanity check): not a cadence


def _steps_between(main: ProcessSteps | None, starts: np.ndarray, steps: int) -> float | None:
    """How many training steps the job runs between two occurrences of a phase: the median spacing of the
    steps at which they start, from :data:`MIN_CADENCE` occurrences on (None below: too few to tell; those
    after the last step count, they keep the cadence). Counting occurrences instead (steps ÷ occurrences)
    is thrown off by the ones that are not part of the cadence: a final save or test after the loop beside
    the periodic ones (Lightning's step-20 checkpoints read "every 16 steps" with one extra save at the
    end), or an eval split into several phases at one step."""
    if main is None or not main.count:
        return steps / len(starts) if steps and len(starts) >= MIN_CADENCE else None
    at = _phase_steps(main, starts)
    if len(at) < MIN_CADENCE:
        return None
    return float(np.median(np.diff(at)))


def batches_per_step(main: ProcessSteps | None) -> float | None:
    """Median DataLoader fetches per step over the steps that fetched (None without a loader)."""
    if main is None or not main.count or "fetches" not in main.table:
        return None
    f = main.table["fetches"]
    f = f[f > 0]
    return float(np.median(f)) if len(f) else None


MIN_AFTER = 3  # occurrences (and other steps) needed before a per-phase after-cost is measured


def _after_penalty(steps: Table, dur: np.ndarray, stats: PhaseStats, phase_end: np.ndarray) -> None:
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


def loop_span_s(run: Run, main: ProcessSteps | None) -> float | None:
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
            tool = sum(phase_time(ph.filter(own), lo, hi).ns().values())
    return (hi - lo - tool) / 1e9 if hi - lo - tool > 0 else None


def thread_evidence(run: Run, host: HostSummary | None, pid: int | None) -> Threads:
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
        means = [p.cpu_pct["mean"] for p in workers if p.cpu_pct is not None]
        t.busy_workers = sum(1 for m in means if m >= BUSY_WORKER_PCT)
        t.worker_cpu_cores = sum(means) / 100.0
        t.main_cpu_cores = host.main_cpu_pct_mean / 100.0 if host.main_cpu_pct_mean is not None else None
    return t


def first_step(main: ProcessSteps | None) -> dict[str, float]:
    if main is None or not main.count:
        return {}
    st, i = main.table, 0
    return {"duration_s": max(int(st["end_ns"][i] - st["start_ns"][i]), 0) / 1e9,
            "data_wait_s": max(int(st["data_wait_ns"][i]), 0) / 1e9,
            "data_cpu_s": max(int(st["data_cpu_ns"][i]), 0) / 1e9}


def cpu_limit_cores(host: HostHardware) -> float | None:
    """The tighter of the job's cgroup CPU quota (cpu.max) and its CPU affinity, in cores; None: no limit."""
    limits = [float(v) for v in (host.get("cgroup_cpu_limit_cores"), host.get("cpu_affinity_cores"))
              if isinstance(v, (int, float)) and v > 0]
    return min(limits) if limits else None


def framework(run: Run) -> str | None:
    """The framework that runs the loop: the hook's ``framework`` record, written at the first step with the
    framework whose modules the job imported."""
    for info in run.infos:
        if info.get("kind") == "framework" and info.get("name"):
            return str(info["name"])
    return None


@dataclass
class LoopFacts:
    """What the diagnosis needs of the training loop beyond the outcomes (see the module docstring)."""

    phases: dict[str, PhaseStats] = field(default_factory=dict)
    loop_s: float | None = None  # first step start → last step end: the training loop incl. its phases
    threads: Threads = field(default_factory=Threads)
    first_step: dict[str, float] = field(default_factory=dict)
    batches_per_step: float | None = None
    dataloaders: list[LoaderConfig] = field(default_factory=list)  # DataLoader configs the hook saw
    # the framework that runs the loop, as the hook saw its modules imported ("lightning", "transformers",
    # "accelerate", "deepspeed"); None: plain PyTorch or not known
    framework: str | None = None
    logical_cores: int | None = None
    # the CPU the job may use below the host's cores: its cgroup's quota (cpu.max, in cores) or its CPU
    # affinity, the tighter; None where neither limits it
    cpu_limit_cores: float | None = None
    gpu_hw: list[GpuHardware] = field(default_factory=list)  # NVML static info (power limit, max clocks)


def loop_facts(run: Run, view: StepView, host: HostSummary | None, basis_steps: int,
               basis_step_time_s: float | None, recorded: bool) -> LoopFacts:
    """``basis_*``: the steps gains are measured against (the recorded loop, else the traced steps)."""
    rec = run.meta.get("recorder") or {}
    return LoopFacts(
        phases=phase_stats(run, view.main, basis_steps),
        loop_s=loop_span_s(run, view.main) if recorded else (basis_step_time_s or None),
        threads=thread_evidence(run, host, view.pid),
        first_step=first_step(view.main),
        batches_per_step=batches_per_step(view.main),
        dataloaders=[loader_config(i) for i in run.infos if i.get("kind") == "dataloader"],
        framework=framework(run),
        logical_cores=(rec.get("host") or {}).get("logical_cores"),
        cpu_limit_cores=cpu_limit_cores(rec.get("host") or {}),
        gpu_hw=list(rec.get("gpu") or []),
    )
