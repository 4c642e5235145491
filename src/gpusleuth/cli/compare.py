"""``gpusleuth compare RUN_A RUN_B …``: outcomes side by side, deltas with noise bands, scaling, CI gates."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpusleuth.cli.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "compare",
        help="compare recorded runs: deltas with noise bands, scaling efficiency, --fail-if gates for CI",
        description=(
            "Put the outcomes of several runs of a job side by side: throughput, step time, goodput, data wait, "
            "MFU, energy and cost, each with its change against the first run and whether that change is beyond "
            "the step-time noise. Runs with different process/GPU counts get a scaling efficiency. --fail-if "
            "gates make the command exit 1 when a run regresses, for CI."
        ),
        epilog="Example: gpusleuth compare runs/main runs/pr-123 --fail-if 'throughput<-5%' --fail-if 'goodput<0.7'",
    )
    p.add_argument("runs", nargs="+", type=Path,
                   help="what `report` reads, one per side: run directories, profiler traces, GPU logs or "
                   "exports; the first is the baseline")
    p.add_argument("--fail-if", action="append", default=[], metavar="EXPR",
                   help="METRIC OP VALUE[%%]: with %% a change relative to the baseline (throughput<-5%%), "
                   "without an absolute value (goodput<0.8). Metrics: throughput, tokens_per_s, step_time, "
                   "step_time_p95, goodput, data_wait, mfu, energy_per_sample, cost_per_1k, wall. A relative gate on "
                   "throughput, tokens_per_s or step_time fails only on a change beyond the noise band (one run "
                   "per side: ±15%%). A gate on a metric a run lacks is an error (exit 2). Repeatable.")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--html", type=Path, default=None, metavar="OUT",
                   help="also write the comparison as a self-contained HTML page with charts: changes against the "
                   "baseline with the noise band, throughput, step-time spread and series, wall-time split, "
                   "findings per run, scaling")
    from gpusleuth.cli.options import add_analysis_options, add_import_options

    add_import_options(p)
    add_analysis_options(p)
    p.set_defaults(func=compare_command)


def compare_command(args: argparse.Namespace) -> int:
    from gpusleuth.lean_imports import keep_pandas_out

    keep_pandas_out()
    from gpusleuth.analysis.compare import Gate
    from gpusleuth.errors import InputError
    from gpusleuth.pipeline.compare import build_comparison
    from gpusleuth.cli.options import analysis_options, import_options

    if len(args.runs) < 2:
        raise InputError(args.runs[0], "compare needs at least two runs (run directories, traces or logs)")
    gates = [Gate.parse(g) for g in args.fail_if]
    from gpusleuth.cli.output import count_progress

    progress = count_progress(len(args.runs), "loading runs") if sys.stderr.isatty() else None
    result = build_comparison(list(args.runs), analysis_options(args), gates, progress,
                              import_options=import_options(args))
    from gpusleuth.cli.output import emit
    from gpusleuth.render.formats import COMPARISON_FORMATS, stream_format

    emit(COMPARISON_FORMATS, stream_format(json=args.json), result)
    if args.html:
        emit(COMPARISON_FORMATS, "html", result, out=args.html)
    if any(g.unavailable for g in getattr(result.comparison, "gates", [])):
        print("gpusleuth compare: a --fail-if gate names a metric a run lacks (see the gates above)",
              file=sys.stderr)
        return 2
    return 1 if result.failed else 0
