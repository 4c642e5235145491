"""``gpusleuth report RUN_DIR | TRACE.json[.gz]…``: analyse, diagnose and print."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpusleuth.cli.options import (add_analysis_options, add_import_options, add_output_options,
                                   add_parallel_options, analysis_options, import_options)
from gpusleuth.cli.output import emit, rank_progress, set_progress
from gpusleuth.errors import InputError

if TYPE_CHECKING:
    from gpusleuth.analysis.options import AnalysisOptions
    from gpusleuth.analysis.ranks import RankSummary
    from gpusleuth.cli.options import Subparsers
    from gpusleuth.cli.output import Tick
    from gpusleuth.report.model import Report
    from gpusleuth.run.model import Run


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "report",
        help="report on a recorded run directory or on PyTorch profiler traces",
        description=(
            "Print what the job waited on: the outcome headline, the ranked findings with their estimated "
            "gain (× throughput, seconds, $ with a price), then the evidence (steps, GPU and host telemetry, "
            "per-rank trace tables), each finding's fix, and one line per missing data source saying what "
            "to record to evaluate the rest. Accepts a gpusleuth run directory (or several of one job — one `gpusleuth "
            "run` per node or per rank — reported as one job, clocks aligned on their shared collectives), one "
            "or more PyTorch "
            "profiler (Kineto) trace files (.json or .json.gz) or Nsight Systems SQLite exports (one per "
            "rank), or what you already have: an nvidia-smi --query-gpu CSV or dmon log, dcgm-exporter / "
            "nvidia_gpu_exporter scrapes or a Prometheus query_range JSON. Files are recognised by content, "
            "not name. A trace set gets the same rules as a recording (precision, launch, sync, H2D, Python "
            "overhead, communication, stragglers), with gains in seconds of its traced steps. "
            "Trace JSON may come in any layout (pretty, one event per line, one line), plain or compressed "
            "(gzip, bzip2, xz, zstd, or a zip holding the trace). Damaged input is salvaged and what was lost "
            "is listed under losses."
        ),
        epilog="Examples:\n  gpusleuth report gpusleuth-runs/20261121-101500-python-train.py\n"
        "  gpusleuth report runs/node0 runs/node1          # one job recorded per node\n"
        "  gpusleuth report rank-0.json.gz rank-1.json.gz --json > report.json\n"
        "  gpusleuth report traces/rank-*.json.gz --jobs 4   # 4 worker processes, one rank each at a time\n"
        "  gpusleuth report traces/rank-*.json.gz --ray      # a local Ray cluster (--ray ADDRESS: a running one)\n"
        "  gpusleuth report gpu_log.csv --price-per-gpu-hour 2.5\n"
        "  gpusleuth report profile.sqlite --step-range train_step",
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", type=Path, help="a run directory (several: the nodes of one job), or trace files")
    p.add_argument("--json", action="store_true", help="print one JSON object (docs/report-json.md) on stdout")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="list every rule that could not run and why (default: one line per missing data source)")
    add_output_options(p)
    add_import_options(p)
    from gpusleuth.cli.trackers import add_tracker_options

    add_tracker_options(p)
    add_analysis_options(p)
    add_parallel_options(p)
    p.set_defaults(func=report_command)


def report_command(args: argparse.Namespace) -> int:
    from gpusleuth.lean_imports import keep_pandas_out
    from gpusleuth.sources.inputs import read_inputs

    keep_pandas_out()
    paths = list(args.paths)
    if getattr(args, "ray", None) and os.path.isfile(args.ray):  # `--ray rank-0.json rank-1.json`: a trace, not
        paths.insert(0, Path(args.ray))                          # an address (argparse took it as --ray's value)
        args.ray = ""

    def read_trace_set(files: list[Path]) -> tuple[list[Run], list[RankSummary] | None]:
        from gpusleuth.pipeline.trace_set import load_trace_set

        return load_trace_set(files, jobs=args.jobs, ray_address=args.ray,
                              keep_events=bool(args.annotate),  # it copies each trace's events
                              progress=set_progress if sys.stderr.isatty() else None)

    inputs = read_inputs(paths, import_options=import_options(args), read_trace_set=read_trace_set)
    ranks = len(inputs.job.profiles)
    analysing = inputs.ranks is None and sys.stderr.isatty() and ranks > 1  # workers ticked their own bar
    # the HTML page's chart data only where a page is written (--html, or a tracker's artifacts)
    charts = bool(getattr(args, "html", None) or getattr(args, "mlflow", None) or getattr(args, "wandb", None))
    report = print_report(inputs.job, "json" if args.json else "text", options=analysis_options(args),
                          verbose=getattr(args, "verbose", False),
                          progress=rank_progress(ranks) if analysing else None, ranks=inputs.ranks,
                          display=charts)
    write_outputs(report, args, inputs.traces)
    from gpusleuth.cli.trackers import send_to_trackers

    send_to_trackers(report, inputs.job if inputs.run_dirs else None, args)
    return 0


def print_report(run: Run, fmt: str = "text", to_stderr: bool = False, options: AnalysisOptions | None = None,
                 quiet: bool = False, verbose: bool = False, progress: Tick | None = None,
                 ranks: list[RankSummary] | None = None, display: bool = True) -> Report:
    """Build the run's Report and print it in the format ``fmt`` names (``render/formats.REPORT_FORMATS``:
    text on stdout, or on stderr with ``to_stderr``; json on stdout), unless ``quiet``: then only built, e.g.
    for --html alone.
    ``ranks``: a trace set's per-rank summaries from worker processes (``pipeline/trace_set.py``);
    ``display``: also the HTML page's chart data."""
    from gpusleuth.pipeline.build import build_report

    report = build_report(run, options, progress=progress, ranks=ranks, display=display)
    if not quiet:
        from gpusleuth.cli.output import make_console
        from gpusleuth.render.formats import REPORT_FORMATS, RenderOptions

        # a console only for a format drawn on one: `--json` imports no rich (25 ms of every JSON report)
        console = make_console(to_stderr) if REPORT_FORMATS[fmt].dest == "console" else None
        emit(REPORT_FORMATS, fmt, report, RenderOptions(console=console, verbose=verbose))
    return report


def write_outputs(report: Report, args: argparse.Namespace, runs: list[Run]) -> None:
    """The file outputs besides the printed report: --html and --annotate (docs/html-report.md)."""
    if getattr(args, "html", None):
        from gpusleuth.render.formats import REPORT_FORMATS

        emit(REPORT_FORMATS, "html", report, out=args.html)
    if getattr(args, "annotate", None):
        annotate_traces(report, runs, args.annotate)


def annotate_traces(report: Report, runs: list[Run], out: Path) -> None:
    """One annotated copy per trace; the analyses are the report's (``report.ranks``, same order)."""
    from gpusleuth.render.perfetto import write_annotated
    from gpusleuth.sources.kineto.decompress import text_blocks

    traced = [(r, r.trace, a) for r, a in zip(runs, report.ranks) if r.trace is not None]
    if not traced:
        raise InputError(out, "--annotate needs a profiler trace (give trace files, or a run recorded with "
                              "--profile-steps)")
    if len(traced) > 1:
        out.mkdir(parents=True, exist_ok=True)
    progress = rank_progress(len(traced), "annotating") if sys.stderr.isatty() and len(traced) > 1 else None
    for i, (run, trace, analysis) in enumerate(traced):
        where = run.meta.get("trace_path") or run.path
        if where is None:
            raise InputError(out, "--annotate: a trace whose file is not known cannot be copied")
        source = Path(where)
        target = out / source.name if len(traced) > 1 else out
        try:
            res = write_annotated(text_blocks(source), analysis, trace.meta, trace.pids, target)
        except ValueError as exc:
            raise InputError(source, f"cannot annotate: {exc}") from None
        except OSError as exc:
            raise InputError(target, f"cannot write the annotated trace: {exc.strerror or exc}") from None
        if progress:
            progress(i + 1, len(traced))
        print(f"gpusleuth: annotated trace written to {target} (+{res.events_added:,} events: {res.gaps:,} idle "
              f"gaps, {res.segments:,} partition intervals, {res.steps} steps); open it in ui.perfetto.dev",
              file=sys.stderr)


