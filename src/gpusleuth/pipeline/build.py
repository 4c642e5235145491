"""One pass down for a Run: ``analyze_run`` (the user's files read through ``sources``, then ``analyze``)
and ``build_report`` (that, then ``report_from``).

``analyze_run`` is the one door from a Run to its :class:`RunAnalysis`: it reads what the user named in
files (price table, MLLOG lines) and hands them to the analysis, which reads no file. ``report``,
``compare``, sweeps, ``fleet`` and the demo all come through it, so they agree.
"""

from __future__ import annotations

from typing import Callable

from gpusleuth.analysis.bundle import RunAnalysis, analyze
from gpusleuth.analysis.options import AnalysisOptions
from gpusleuth.analysis.ranks import RankSummary
from gpusleuth.report.build import report_from
from gpusleuth.report.model import Report
from gpusleuth.run.model import Run
from gpusleuth.sources.mllog import MlLog, read_mllog
from gpusleuth.sources.prices import read_price_table


def _mllog(run: Run, opts: AnalysisOptions) -> MlLog | None:
    """The file ``--mllog`` names, else what the run's own output held (read with the run)."""
    return read_mllog(opts.mllog) if opts.mllog else run.mllog


def analyze_run(run: Run, options: AnalysisOptions | None = None, *, min_warmup: int = 0,
                progress: Callable[[int, int], None] | None = None,
                ranks: list[RankSummary] | None = None, display: bool = True) -> RunAnalysis:
    """The Run's analysis with the user's options (those saved at `run` time fill the gaps). ``ranks``:
    a trace set's per-rank summaries computed in worker processes (``pipeline/trace_set.py``);
    ``display``: also the chart data of the HTML report."""
    options = (options or AnalysisOptions()).merged_with(run.meta.get("report_options"))
    return analyze(run, options, prices=read_price_table(options.prices_file), mllog=_mllog(run, options),
                   min_warmup=min_warmup, progress=progress, ranks=ranks, display=display)


def build_report(run: Run, options: AnalysisOptions | None = None, *, display: bool = True,
                 progress: Callable[[int, int], None] | None = None,
                 ranks: list[RankSummary] | None = None) -> Report:
    """Report for a Run: a recording (with its --profile-steps traces), a trace set (``sources.trace_job``),
    or telemetry alone. ``progress(done, total)`` after each trace's analysis; ``ranks``: see ``analyze_run``."""
    return report_from(analyze_run(run, options, progress=progress, ranks=ranks, display=display))
