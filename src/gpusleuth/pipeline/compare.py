"""``gpusleuth compare``'s pass: each input read through the one door (``sources/inputs.read_inputs``), so
compare reads what ``report`` reads — run directories, profiler traces and Nsight Systems exports (their
traced steps), GPU logs and metric exports (no steps: their findings side by side, as for a GPU log
imported into a run directory) — then analysed, reported and compared against the first."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from gpusleuth.analysis.compare import Gate, RunColumn, column_for, compare
from gpusleuth.analysis.options import AnalysisOptions
from gpusleuth.pipeline.build import analyze_run
from gpusleuth.report.build import report_from
from gpusleuth.report.comparison import ComparisonReport, RunView, run_view
from gpusleuth.sources.detect import ImportOptions
from gpusleuth.sources.inputs import read_inputs


def build_comparison(paths: list[Path], options: AnalysisOptions | None, gates: list[Gate],
                     progress: Callable[[int, int], None] | None = None, import_options: ImportOptions | None = None
                     ) -> ComparisonReport:
    """Read each input (one side of the comparison each), build its Report, and compare them against the
    first (the baseline). One at a time: only one input's tables are held at once."""
    columns: list[RunColumn] = []
    views: list[RunView] = []
    for i, path in enumerate(paths):
        a = analyze_run(read_inputs([path], import_options=import_options).job, options, display=False)
        report = report_from(a)
        columns.append(column_for(a))
        views.append(run_view(report, a.view))
        if progress is not None:
            progress(i + 1, len(paths))
    return ComparisonReport(compare(columns, gates), views)
