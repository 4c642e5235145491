"""``gpusleuth fleet DIR…``: across many runs, which jobs waste GPU-hours, how many dollars, on what cause."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpusleuth.cli.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    from gpusleuth.report.fleet import SORTS

    p = sub.add_parser(
        "fleet",
        help="one row per run over many run directories: GPU-hours, goodput, MFU, $ per run, $ lost by cause",
        description=(
            "Tabulate many recorded runs (run directories, or folders of them): job, GPUs, GPU-hours, goodput, "
            "MFU, dollars per run, dollars lost by cause (badput seconds at the run's price), top finding. Reads "
            "each run's summary.json (left by `gpusleuth run`) with DuckDB; runs without one are analysed once "
            "and their summary cached outside the run ($GPUSLEUTH_CACHE_DIR, default ~/.cache/gpusleuth): "
            "fleet never writes a run directory. With --prometheus URL instead: the GPU ledger of a cluster from its own "
            "Prometheus (dcgm-exporter + kube-state-metrics): allocated, productive, low-activity, allocated-but-idle "
            "and unallocated GPU-hours per namespace and pod, idle spans, right-sizing (MIG profile, smaller card, "
            "MPS), dollars. Needs gpusleuth[fleet] (DuckDB, httpx)."
        ),
        epilog="Examples:\n  gpusleuth fleet gpusleuth-runs/ --since 7d --price-per-gpu-hour 2.5\n"
        "  gpusleuth fleet /shared/runs --label 'bert-*' --sort goodput --asc --csv > runs.csv\n"
        "  gpusleuth fleet /shared/runs --html fleet.html\n"
        "  gpusleuth fleet --prometheus http://prometheus:9090 --since 7d --price-per-gpu-hour 2.5\n"
        "  gpusleuth fleet --prometheus https://thanos.example --start 2026-11-01T00:00:00Z --end 2026-11-08T00:00:00Z --csv",
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    p.add_argument("dirs", nargs="*", type=Path,
                   help="run directories, or directories holding run directories (or --prometheus URL instead)")
    p.add_argument("--since", default=None, metavar="WHEN",
                   help="runs started at or after WHEN: an ISO date/time (UTC unless given) or a span back from "
                   "now like 36h, 7d, 2w")
    p.add_argument("--until", default=None, metavar="WHEN", help="runs started before WHEN (same forms)")
    p.add_argument("--label", default=None, metavar="GLOB", help="runs whose label matches, e.g. 'bert-*'")
    p.add_argument("--sort", default="lost", choices=sorted(SORTS), help="order rows by (default: lost, largest first)")
    p.add_argument("--asc", action="store_true", help="smallest first")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="show N rows (default: 50 in the terminal, all in --json/--csv/--html)")
    p.add_argument("--price-per-gpu-hour", type=float, default=None, metavar="USD",
                   help="re-price every run at this GPU-hour price (default: the price each run was reported with)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON object (rows, totals, lost by cause)")
    out.add_argument("--csv", action="store_true", help="print the rows as CSV")
    p.add_argument("--html", type=Path, default=None, metavar="OUT",
                   help="also write an HTML page with the cost-of-waste chart by cause")
    p.add_argument("--no-analyse", action="store_true",
                   help="only runs that already have a summary (their own or cached; never run a report here)")
    from gpusleuth.cli.fleet_prometheus import add_prometheus_options

    add_prometheus_options(p)
    p.set_defaults(func=fleet_command)


def fleet_command(args: argparse.Namespace) -> int:
    from gpusleuth.cli.output import count_progress, emit
    from gpusleuth.errors import InputError
    from gpusleuth.lean_imports import keep_pandas_out
    from gpusleuth.pipeline.fleet import fleet_summaries
    from gpusleuth.report.fleet import FleetFilter, parse_when, query_fleet
    from gpusleuth.sources.rundir import find_run_dirs

    keep_pandas_out()
    if args.prometheus:
        from gpusleuth.cli.fleet_prometheus import prometheus_command

        return prometheus_command(args)
    if not args.dirs:
        raise InputError("fleet", "give run directories (or folders of them), or --prometheus URL")
    try:
        flt = FleetFilter(
            since_ns=parse_when(args.since) if args.since else None,
            until_ns=parse_when(args.until) if args.until else None,
            label=args.label, sort=args.sort, ascending=args.asc, price_per_gpu_hour=args.price_per_gpu_hour,
            limit=args.limit if args.limit is not None else (None if args.json or args.csv or args.html else 50),
        )
    except ValueError as exc:
        raise InputError(Path(args.since or args.until or "."), str(exc)) from None
    left_out: list[str] = []  # folders that could not be entered
    run_dirs = find_run_dirs(args.dirs, left_out)
    if not run_dirs:
        raise InputError(args.dirs[0], "no run directories here (a run directory holds meta.json)"
                         + (f"; {len(left_out)} folder(s) could not be entered: {left_out[0]}" if left_out else ""))
    bar = (count_progress(len(run_dirs), "analysing runs without a summary")
           if sys.stderr.isatty() and not args.no_analyse else None)
    summaries, skipped = fleet_summaries(run_dirs, analyse=not args.no_analyse, progress=bar)
    fleet = query_fleet(summaries, flt)
    fleet.skipped = left_out + skipped + fleet.skipped
    from gpusleuth.render.formats import FLEET_FORMATS, stream_format

    if args.html:
        emit(FLEET_FORMATS, "html", fleet, out=args.html)
        if args.limit is None and not (args.json or args.csv):
            fleet.rows = fleet.rows[:50]
    emit(FLEET_FORMATS, stream_format(json=args.json, csv=args.csv), fleet)
    return 0
