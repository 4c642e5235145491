"""``gpusleuth compare``'s pass: each run directory loaded, analysed and reported, then compared."""

from __future__ import annotations

from pathlib import Path

from gpusleuth.analysis.compare import Gate, RunColumn, column_for, compare
from gpusleuth.pipeline.build import analyze_run
from gpusleuth.report.build import report_from
from gpusleuth.report.comparison import ComparisonReport, RunView, run_view
from gpusleuth.sources.rundir import load_run


def build_comparison(paths: list[Path], options, gates: list[Gate], progress=None) -> ComparisonReport:
    """Load each run, build its Report, and compare them against the first (the baseline)."""
    columns: list[RunColumn] = []
    views: list[RunView] = []
    for i, path in enumerate(paths):
        a = analyze_run(load_run(path), options, display=False)
        report = report_from(a)
        columns.append(column_for(a))
        views.append(run_view(report, a.view))
        if progress is not None:
            progress(i + 1, len(paths))
    return ComparisonReport(compare(columns, gates), views)
