"""Everything the rules may look at, computed once by the analysis stage.

Rules take a :class:`Facts` and return findings; they never read files or the raw Run tables, so each
rule stays a small pure function that can be tested on numbers alone. Every field beyond the first four
has a default, so a test builds only what its rule reads.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from gpusleuth.analysis.comm import CommSummary, RankComm
from gpusleuth.serving.analysis.engine import EngineAnalysis, EngineLevel
from gpusleuth.analysis.gpu_timeline import GpuTimeline, Utilization
from gpusleuth.analysis.host_ops import HostOps
from gpusleuth.serving.analysis.load import LoadAnalysis, LoadLevel
from gpusleuth.analysis.loop import GpuHardware, LoaderConfig, PhaseStats, Threads
from gpusleuth.analysis.outcomes import Outcomes, StepStats
from gpusleuth.serving.analysis.request_model import RequestAnalysis
from gpusleuth.serving.analysis.request_model import MissLevel
from gpusleuth.analysis.stalls import RankAt, StallVerdict
from gpusleuth.analysis.telemetry import GpuSummary
from gpusleuth.analysis.host_telemetry import HostSummary
from gpusleuth.analysis.trace import TraceAnalysis

# the analysis types a rule names in its own annotations: rules import them from here, not from analysis/
__all__ = ["CommSummary", "EngineLevel", "Facts", "GpuHardware", "GpuTimeline", "HostOps", "LoadLevel", "LoaderConfig",
           "MissLevel", "PhaseStats", "RankAt", "RankComm", "RequestAnalysis", "StallVerdict", "Threads",
           "TraceAnalysis", "Utilization"]


@dataclass
class Facts:
    outcomes: Outcomes
    gpus: list[GpuSummary]
    host: HostSummary | None
    gpu_note: str | None  # why there is no GPU telemetry, if there is none
    dataloaders: list[LoaderConfig] = field(default_factory=list)  # configs the hook saw
    logical_cores: int | None = None
    # the CPU the job may use below the host's cores: its cgroup's quota (cpu.max, in cores) and its CPU
    # affinity; None where neither limits it
    cpu_limit_cores: float | None = None
    gpu_hw: list[GpuHardware] = field(default_factory=list)  # NVML static info (power limit, max clocks)
    phases: dict[str, PhaseStats] = field(default_factory=dict)
    loop_s: float | None = None  # first step start → last step end: the training loop incl. its phases
    threads: Threads = field(default_factory=Threads)
    traces: list[TraceAnalysis] = field(default_factory=list)  # one per --profile-steps trace (or per rank)
    host_ops: list[HostOps] = field(default_factory=list)  # analysis.host_ops.host_op_stats per trace
    # the framework that runs the loop ("lightning", "transformers", "accelerate", "deepspeed"); None: plain
    # PyTorch or not known (the hook's ``framework`` record)
    framework: str | None = None
    # the first step carries one-off costs (DataLoader worker start-up inside iter(loader), lazy init):
    # its duration, data wait and data CPU, so steady-state rules can leave it out
    first_step: dict[str, float] = field(default_factory=dict)
    # DataLoader batches per optimizer step (median over steps that fetched): above 1 under gradient
    # accumulation, where a framework knob counted in batches (Lightning's val_check_interval) ≠ steps
    batches_per_step: float | None = None
    # what one second of the job's wall time costs (all its devices), to price each gain; None: no price
    dollars_per_second: float | None = None
    # False when nothing was recorded (profiler traces or telemetry read alone): ``outcomes`` is then the
    # traced steps, so gains are seconds of those steps, and step-instrumentation numbers are unmeasured
    recorded: bool = True
    # the structure check's doubt about the step counts (analysis/structure.py), or None: findings priced per
    # step lose a level of confidence and say why (diagnosis/engine.py)
    step_doubt: str | None = None
    # utilization over time per GPU (analysis.gpu_timeline), for telemetry-only runs (imported GPU logs)
    gpu_timeline: list[GpuTimeline] = field(default_factory=list)
    # analysis.comm.CommSummary: collectives matched across ranks (hook records, else per-rank traces)
    comm: CommSummary | None = None
    # serving.analysis.load.LoadAnalysis of `gpusleuth load`: per-level rps and latencies, the knee; None without load
    load: LoadAnalysis | None = None
    # serving.analysis.request_model.RequestAnalysis: a server's requests (queue/pre/infer/post, CPU, accelerator); None: none
    requests: RequestAnalysis | None = None
    # an LLM engine's own /metrics per load level; None: none read
    engine: EngineAnalysis | None = None
    stalls: list[StallVerdict] = field(default_factory=list)  # stalls the recorder's watch saw, judged

    # --- small derived helpers every rule family uses ---
    @property
    def steps(self) -> StepStats:
        return self.outcomes.steps

    @property
    def step_mean_s(self) -> float:
        s = self.outcomes.steps
        return s.step_time_s / s.steps if s.steps else 0.0

    @property
    def usable_cores(self) -> float | None:
        """Cores the job may run on: the host's, bounded by its cgroup quota and CPU affinity."""
        cores = self.logical_cores or (self.host.logical_cores if self.host else None)
        if cores is None:
            return self.cpu_limit_cores
        return min(float(cores), self.cpu_limit_cores) if self.cpu_limit_cores else float(cores)

    @property
    def loop(self) -> float:
        """The training loop's length (steps plus phases between them), for wall-level gains."""
        if self.loop_s:
            return self.loop_s
        o = self.outcomes
        return max(o.wall_s - o.startup_s - o.tail_s, 1e-9)

    # --- one rank's or one GPU's view, for the rules that judge each on its own (rules/_scope.py) ---
    def for_rank(self, trace: TraceAnalysis) -> Facts:
        """These facts seen from one rank: its trace (one of ``self.traces``) and its host-op statistics;
        everything else — the job's steps, loop, host, GPUs, prices — as it is, so a rank's gain is priced
        against the job's loop as before. Nothing is recomputed: the view holds the analysis's own objects."""
        at = next(i for i, t in enumerate(self.traces) if t is trace)
        return self.rank_views()[at]

    def rank_views(self) -> list[Facts]:
        """``for_rank`` of every trace, in one pass (a trace set may hold thousands of ranks). Host ops name
        their trace by its place in ``traces`` (the analysis sets ``HostOps.trace``: labels repeat when several
        single-rank jobs' traces are read together); ops built without it are paired by label."""
        at: dict[int, HostOps] = {}
        by_label: dict[str, HostOps] = {}
        for h in self.host_ops:
            if h.trace is not None:
                at.setdefault(h.trace, h)
            else:
                by_label.setdefault(h.label, h)
        views = []
        for i, t in enumerate(self.traces):
            ops = at.get(i) or by_label.get(t.label)
            views.append(self._view(traces=[t], host_ops=[] if ops is None else [ops]))
        return views

    def for_gpu(self, gpu: GpuSummary) -> Facts:
        """These facts seen from one GPU: its summary; the rest (the job's steps, host, traces, utilization
        timelines — a rule picks its card's by index) as it is."""
        return self._view(gpus=[gpu])

    def _view(self, **only: Any) -> Facts:
        """A shallow copy with the given fields replaced: the same objects everywhere else. (Not
        ``dataclasses.replace``, which re-runs ``__init__``: a job of 2,048 ranks made 14,000 views.)"""
        view = copy.copy(self)
        for name, value in only.items():
            setattr(view, name, value)
        return view
