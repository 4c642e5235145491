"""Build a Report, one pass down: Run → analyze → build_facts → diagnose → Report.

``analyze_run`` is the one door from a Run to its :class:`RunAnalysis`: it reads what the user named in
files (price table, MLLOG lines — through ``sources/``) and hands them to the analysis, which reads no
file. ``report``, ``compare``, sweeps and the demo all come through it, so they agree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from gpusleuth.analysis.bundle import RunAnalysis, analyze
from gpusleuth.analysis.options import ReportOptions
from gpusleuth.analysis.ranks import RankSummary
from gpusleuth.diagnosis.engine import diagnose
from gpusleuth.diagnosis.gather import build_facts
from gpusleuth.report.model import Report, RunInfo, group_missing
from gpusleuth.report.serving import serving_section
from gpusleuth.report.timeseries import build_display
from gpusleuth.run.model import Run
from gpusleuth.sources.mllog import read_mllog
from gpusleuth.sources.prices import read_price_table

OUTPUT_LOG = "output.log"  # the job's captured output, where MLLOG lines are looked for by default


def _run_info(run: Run) -> RunInfo:
    m = run.meta
    rec = m.get("recorder") or {}
    hardware = {"gpus": rec.get("gpu") or [], "host": rec.get("host") or {}}
    if m.get("device"):
        hardware["device"] = m.get("device")
    return RunInfo(
        label=run.label,
        path=str(run.path) if run.path else m.get("trace_path"),
        source=str(m.get("source") or "recorder"),
        command=m.get("command"),
        exit_code=m.get("exit_code"),
        signal=m.get("signal"),
        stopped_by=m.get("stopped_by"),
        wall_s=run.wall_s,
        start_ns=run.start_ns,
        end_ns=run.end_ns,
        hardware=hardware,
        nodes=list(m.get("nodes") or []),
    )


def _mllog(run: Run, opts: ReportOptions):
    if opts.mllog:
        return read_mllog(opts.mllog)
    if run.path is not None and run.path.is_dir() and (run.path / OUTPUT_LOG).exists():
        log = read_mllog(run.path / OUTPUT_LOG)
        return log if log.events else None
    return None


def analyze_run(run: Run, options: ReportOptions | None = None, *, min_warmup: int = 0,
                progress: Callable[[int, int], None] | None = None,
                ranks: list[RankSummary] | None = None) -> RunAnalysis:
    """The Run's analysis with the user's options (those saved at `run` time fill the gaps). ``ranks``:
    a trace set's per-rank summaries computed in worker processes (``report/trace_set.py``)."""
    options = (options or ReportOptions()).merged_with(run.meta.get("report_options"))
    return analyze(run, options, prices=read_price_table(options.prices_file), mllog=_mllog(run, options),
                   min_warmup=min_warmup, progress=progress, ranks=ranks)


def report_from(a: RunAnalysis, *, display: bool = True) -> Report:
    """Diagnose an analysis and assemble its Report. ``display``: build the chart data (HTML) too."""
    findings, missing = diagnose(build_facts(a))
    run = a.run
    info = _run_info(run)
    if run.trace is None and len(run.profiles) > 1 and not a.recorded:
        info.label = f"{len(run.profiles)} traces"
    return Report(
        run=info, outcomes=a.outcomes, gpus=a.gpus, gpu_note=a.gpu_note, host=a.host,
        findings=findings, not_evaluated=missing, losses=a.losses, ranks=a.traces, headline=a.headline,
        display=build_display(run if run.trace is None and run.start_ns is not None else None, a.traces, a.view)
        if display else None,
        missing_summary=group_missing(missing), comm=a.comm, serving=serving_section(a.load),
        requests=a.requests,
    )


def build_report(run: Run, options: ReportOptions | None = None, *, display: bool = True,
                 progress: Callable[[int, int], None] | None = None,
                 ranks: list[RankSummary] | None = None) -> Report:
    """Report for a Run: a recording (with its --profile-steps traces), a trace set (``trace_job``), or
    telemetry alone. ``progress(done, total)`` after each trace's analysis; ``ranks``: see ``analyze_run``."""
    return report_from(analyze_run(run, options, progress=progress, ranks=ranks), display=display)


def trace_job(runs: list[Run]) -> Run:
    """Profiler traces read directly (one Run per rank) as one job: a Run whose profiles are the ranks."""
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    meta = {"source": first.meta.get("source", "kineto"), "label": f"{len(runs)} traces",
            "trace_path": first.meta.get("trace_path"), "device": first.meta.get("device"),
            "world_size": first.meta.get("world_size")}
    path = Path(first.meta["trace_path"]).parent if first.meta.get("trace_path") else None
    return Run(meta=meta, path=path, profiles=list(runs))
