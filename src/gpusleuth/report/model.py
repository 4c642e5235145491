"""The Report: everything a renderer shows, already computed. Renderers only format it.

Its JSON form (``gpusleuth report --json``) is a documented, versioned contract (docs/report-json.md):
later versions add keys, never rename or remove them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from gpusleuth.analysis.comm import CommSummary
from gpusleuth.serving.analysis.engine import EngineAnalysis
from gpusleuth.analysis.headline import Headline
from gpusleuth.analysis.identity import RunInfo
from gpusleuth.analysis.job_gpus import JobGpus
from gpusleuth.analysis.outcomes import Outcomes
from gpusleuth.serving.analysis.request_model import RequestAnalysis
from gpusleuth.analysis.timeseries import DisplayData
from gpusleuth.analysis.trace import TraceAnalysis
from gpusleuth.analysis.telemetry import GpuSummary
from gpusleuth.analysis.host_telemetry import HostSummary
from gpusleuth.diagnosis.finding import Finding, Missing
from gpusleuth.serving.report import ServingSection

SCHEMA = "gpusleuth.report/1"


@dataclass
class MissingGroup:
    """The rules one missing data source left unevaluated, and how to get it: one line in the report."""

    data: str
    how: str
    rules: list[str]


def group_missing(missing: list[Missing]) -> list[MissingGroup]:
    groups: dict[str, MissingGroup] = {}
    for m in missing:
        g = groups.setdefault(m.data, MissingGroup(m.data, m.how, []))
        g.rules.append(m.rule)
    return sorted(groups.values(), key=lambda g: -len(g.rules))


@dataclass
class Report:
    run: RunInfo
    outcomes: Outcomes | None
    gpus: list[GpuSummary]
    gpu_note: str | None
    host: HostSummary | None
    findings: list[Finding]
    not_evaluated: list[Missing]
    losses: list[str]
    ranks: list[TraceAnalysis] = field(default_factory=list)  # trace analyses, one per rank
    headline: Headline | None = None  # throughput, goodput, MFU, energy, cost, time to target
    # downsampled series and histograms for charts (HTML); not in the JSON
    display: DisplayData | None = None
    missing_summary: list[MissingGroup] = field(default_factory=list)  # not_evaluated, one entry per data source
    comm: CommSummary | None = None  # a multi-rank job's collectives, waiting, stragglers
    serving: ServingSection | None = None  # `gpusleuth load` levels, the knee, serving outcomes
    requests: RequestAnalysis | None = None  # a recorded server's per-request stages
    engine: EngineAnalysis | None = None  # an LLM engine's own /metrics per load level
    gpu_scope: JobGpus | None = None  # which sampled GPUs were the job's, and how that was told
    # rules that do not apply to this run (diagnosis.engine.not_applicable), apart from the missing data
    not_applicable: list[Missing] = field(default_factory=list)
    not_applicable_why: str = ""

    def to_dict(self) -> dict[str, Any]:
        o = self.outcomes
        outcomes = None
        if o is not None:
            s = o.steps
            outcomes = {
                "steps": s.steps,
                "step_time_p50_s": s.step_time_p50_s,
                "step_time_p95_s": s.step_time_p95_s,
                "step_time_mean_s": s.step_time_mean_s,
                "step_time_cv": s.step_time_cv,
                "samples": s.samples,
                "samples_per_s": s.samples_per_s,
                "wall_s": o.wall_s,
                "startup_s": o.startup_s,
                "idle_tail_s": o.tail_s,
                "after_training_s": o.after_training_s,
                "time_share": o.time_share,
                "time_s": o.time_s,
                "data_wait_s": s.data_wait_s,
                "data_wait_share_of_steps": (None if s.data_wait_measured_steps == 0 else
                                             s.data_wait_share_of_steps),
                "data_wait_measured_steps": s.data_wait_measured_steps,
                "optimizer_s": s.optimizer_s,
                "gpu_time_s": s.gpu_time_s,
                "step_delimiter": s.delimiter,
                "main_pid": s.pid,
                "world_size": s.world_size,
                "workers": s.workers,
                "model_parallel": s.model_parallel,
                "job_samples_per_s": s.job_samples_per_s,
                "ranks": [dataclasses.asdict(r) for r in s.ranks],
            }
        if outcomes is not None and self.headline is not None:
            outcomes = {**_headline(self.headline), **outcomes}
        return _clean_dict(
            {
                "schema": SCHEMA,
                "run": dataclasses.asdict(self.run),
                "outcomes": outcomes,
                "gpu": [dataclasses.asdict(g) for g in self.gpus],
                "gpu_note": self.gpu_note,
                "gpu_scope": ({"job_gpus": self.gpu_scope.indices, "how": self.gpu_scope.how,
                               "not_the_jobs": self.gpu_scope.others, "decided": self.gpu_scope.decided}
                              if self.gpu_scope is not None else None),
                "host": dataclasses.asdict(self.host) if self.host else None,
                "findings": [_finding(f) for f in self.findings],
                "not_evaluated": [dataclasses.asdict(m) for m in self.not_evaluated],
                "not_evaluated_summary": [dataclasses.asdict(g) for g in self.missing_summary],
                "not_applicable": {"why": self.not_applicable_why, "rules": [m.rule for m in self.not_applicable]},
                "losses": self.losses,
                "ranks": [r.to_dict() for r in self.ranks],
                "communication": self.comm.to_dict() if self.comm is not None else None,
                "serving": self.serving.to_dict() if self.serving is not None else None,
                "request_stages": self.requests.to_dict() if self.requests is not None else None,
                "engine_metrics": self.engine.to_dict() if self.engine is not None else None,
            }
        )


def _headline(h: Headline) -> dict[str, Any]:
    """The headline keys lead ``outcomes``: what the user pays and gets comes first."""
    asdict = dataclasses.asdict
    return {
        "throughput": {
            "samples_per_s": h.steady.samples_per_s,
            "tokens_per_s": h.steady.tokens_per_s,
            "steady_steps": h.steady.steps,
            "warmup_steps": h.steady.warmup_steps,
            "step_time_p50_s": h.steady.step_time_p50_s,
            "step_time_p95_s": h.steady.step_time_p95_s,
            "step_time_cv": h.steady.step_time_cv,
        },
        "goodput": asdict(h.goodput),
        "mfu": asdict(h.mfu),
        "energy": asdict(h.energy) if h.energy else None,
        "cost": asdict(h.cost) if h.cost else None,
        "cost_note": h.cost_note,
        "time_to_target": asdict(h.time_to_target) if h.time_to_target else None,
        "gpu_model": h.gpu_model,
        "gpus_used": h.gpus_used,
        "headline_notes": h.notes,
    }


def _finding(f: Finding) -> dict[str, Any]:
    d = dataclasses.asdict(f)
    d["evidence"] = [dataclasses.asdict(e) for e in f.evidence]
    return d


def _clean_dict(d: dict[Any, Any]) -> dict[str, Any]:
    """``_clean`` of a mapping, typed as the JSON object it is (keys as strings)."""
    return {str(k): _clean(v) for k, v in d.items()}


def _clean(x: Any) -> Any:
    """JSON has no NaN/inf: emit null so every consumer can parse it."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return _clean_dict(x)
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):  # numpy scalars
        return _clean(x.item())
    return x
