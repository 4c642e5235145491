"""What ``gpusleuth compare`` shows, built once for every renderer (terminal, JSON, HTML).

The numbers (metrics, deltas, noise bands, scaling, gates) are the analysis in ``analysis/compare.py``.
This module adds, per run, what the charts need and what only a side-by-side view makes useful: step
times over the run (min/max downsampled, so a spike stays visible), the spread of steady step times, the
wall-time split, and each run's findings by cause — so "did the fix remove the finding, and what came
next" reads off one chart. Renderers only format it (docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpusleuth.analysis.compare import Comparison
from gpusleuth.analysis.steps import StepView
from gpusleuth.analysis.timeseries import MAX_POINTS, minmax_downsample
from gpusleuth.diagnosis.taxonomy import Severity
from gpusleuth.report.model import Report

SCHEMA = "gpusleuth.compare/1"


@dataclass
class StepSeries:
    """Step time (ms) by step index, carved of phases; ``warmup`` leading steps are excluded from stats."""

    x: list[float]
    y: list[float | None]
    points: int  # steps before downsampling
    warmup: int


@dataclass
class StepSpread:
    """Steady (post-warm-up) step times, ms: what a box plot draws, computed here rather than in a browser."""

    n: int
    min: float
    p5: float
    p25: float
    p50: float
    p75: float
    p95: float
    max: float
    mean: float


@dataclass
class FindingBrief:
    cause: str
    severity: Severity
    title: str
    step_share: float | None
    wall_share: float | None
    speedup: float | None


@dataclass
class RunView:
    label: str
    path: str | None
    command: list[str] | None
    steps: StepSeries | None
    spread: StepSpread | None
    time_share: dict[str, float] = field(default_factory=dict)
    time_s: dict[str, float] = field(default_factory=dict)
    findings: list[FindingBrief] = field(default_factory=list)


@dataclass
class ComparisonReport:
    comparison: Comparison
    views: list[RunView]

    @property
    def failed(self) -> bool:
        return self.comparison.failed

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document: the analysis, plus each run's findings (cause ids are stable)."""
        out = {"schema": SCHEMA, **dataclasses.asdict(self.comparison), "failed": self.failed}
        for run, view in zip(out["runs"], self.views):
            run["findings"] = [dataclasses.asdict(f) for f in view.findings]
            run["step_spread_ms"] = dataclasses.asdict(view.spread) if view.spread else None
        return out


def _views_of_steps(secs: np.ndarray, warm: int) -> tuple[StepSeries | None, StepSpread | None]:
    if not len(secs):
        return None, None
    ms = secs * 1e3
    x, y = minmax_downsample(np.arange(len(ms), dtype=np.float64), ms, MAX_POINTS)
    series = StepSeries(x=[float(v) for v in x], y=[round(float(v), 4) if np.isfinite(v) else None for v in y],
                        points=len(ms), warmup=warm)
    steady = ms[warm:]
    if not len(steady):
        return series, None
    q = np.percentile(steady, [0, 5, 25, 50, 75, 95, 100])
    lo, p5, p25, p50, p75, p95, hi = (round(float(v), 4) for v in q)
    spread = StepSpread(len(steady), lo, p5, p25, p50, p75, p95, hi, mean=round(float(steady.mean()), 4))
    return series, spread


def run_view(report: Report, view: StepView) -> RunView:
    """One run's chart data, from its Report and its step view (steps carved of phases, warm-up)."""
    main = view.main
    series, spread = _views_of_steps(main.seconds, main.warmup) if main is not None else (None, None)
    o = report.outcomes
    briefs = []
    for f in report.findings:
        g = f.estimated_gain
        briefs.append(FindingBrief(f.cause, f.severity, f.title, g.step_share if g else None,
                                   g.wall_share if g else None, g.speedup if g else None))
    return RunView(label=report.run.label, path=report.run.path, command=report.run.command, steps=series,
                   spread=spread,
                   time_share=dict(o.time_share) if o else {}, time_s=dict(o.time_s) if o else {},
                   findings=briefs)
