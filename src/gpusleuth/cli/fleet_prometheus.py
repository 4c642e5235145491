"""``gpusleuth fleet --prometheus URL``: the GPU ledger from a cluster's own Prometheus (the flags and the verb's body).

The ``fleet`` verb (cli/fleet.py) hands over here when ``--prometheus`` is given; the pass itself is
ledger/report.py, the output one renderer per format.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpusleuth" / "fleet-prometheus.duckdb"


def add_prometheus_options(p: Any) -> None:
    g = p.add_argument_group(
        "from a cluster's Prometheus (dcgm-exporter + kube-state-metrics)",
        "Any server with Prometheus's HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics). The window is "
        "--start/--end (RFC 3339) or --since (a span back from now); credentials from $GPUSLEUTH_PROMETHEUS_TOKEN "
        "(bearer) or $GPUSLEUTH_PROMETHEUS_BASIC_AUTH ('user:password'), or the files below. docs/fleet.md.")
    g.add_argument("--prometheus", metavar="URL", default=None,
                   help="base URL of the metrics server, e.g. http://prometheus:9090 (no run directories then)")
    g.add_argument("--start", metavar="TIME", default=None, help="window start, RFC 3339 (2026-11-01T00:00:00Z)")
    g.add_argument("--end", metavar="TIME", default=None, help="window end, RFC 3339 (default: now)")
    g.add_argument("--step", type=int, default=None, metavar="S",
                   help="seconds per sample, at least the scrape interval (default: the history's own cadence, "
                   "found from its samples per hour; at least 15)")
    g.add_argument("--chunk", type=float, default=6.0, metavar="HOURS",
                   help="hours of history per query (default 6; the cache works in these chunks)")
    g.add_argument("--gpus-per-query", type=int, default=200, metavar="N", help="GPUs per query (default 200)")
    g.add_argument("--parallel-queries", type=int, default=3, metavar="N",
                   help="queries in flight at once (default 3; 1 for a server that must not be pushed)")
    g.add_argument("--selector", default="", metavar="MATCHERS",
                   help="extra label matchers for every series, e.g. 'cluster=\"prod\"'")
    g.add_argument("--group-label", default=None, metavar="LABEL",
                   help="also group by this job/user label of the DCGM series (e.g. user; dcgm-exporter's "
                   "hpc_job, its Slurm job mapping, is used without this flag)")
    g.add_argument("--power-cap", type=float, default=None, metavar="W",
                   help="what-if: per workload and served model, what a power cap of W watts per GPU would save and "
                   "cost, from its own power and SM-clock samples ('inert' where its power never reaches W)")
    g.add_argument("--prices", type=Path, default=None, metavar="FILE",
                   help='JSON USD per GPU-hour by card, e.g. {"H100 SXM": 2.5, "A100": 1.2} (over the dated table)')
    g.add_argument("--bearer-token-file", type=Path, default=None, metavar="FILE", help="bearer token in a file")
    g.add_argument("--basic-auth-file", type=Path, default=None, metavar="FILE", help="'user:password' in a file")
    g.add_argument("--ca-file", type=Path, default=None, metavar="PEM", help="CA bundle to verify the server's TLS")
    g.add_argument("--insecure-skip-verify", action="store_true", help="do not verify TLS (not recommended)")
    g.add_argument("--cache", type=Path, default=DEFAULT_CACHE, metavar="FILE",
                   help=f"DuckDB cache of fetched samples, so re-runs and longer windows are incremental "
                   f"(default {DEFAULT_CACHE})")
    g.add_argument("--no-cache", action="store_true", help="fetch everything, keep nothing")
    g.add_argument("--grafana-summary", type=Path, default=None, metavar="FILE",
                   help="also write GPU-hours and USD by namespace × class as Prometheus text (textfile collector)")


def _when(text: str, flag: str) -> int:
    from gpusleuth.errors import InputError
    from gpusleuth.report.fleet import parse_when

    if text.strip().isdigit():  # Unix seconds, as Prometheus's own API takes them
        return int(text)
    try:
        return parse_when(text) // 1_000_000_000
    except ValueError as exc:
        raise InputError(flag, str(exc)) from None


def prometheus_command(args: Any) -> int:
    from gpusleuth.ledger.analysis.model import Pricing
    from gpusleuth.cli.output import count_progress, emit
    from gpusleuth.errors import InputError
    from gpusleuth.ledger.pipeline import build_ledger_report
    from gpusleuth.sources.prices import read_price_table

    if args.dirs:
        raise InputError(args.dirs[0], "give run directories or --prometheus URL, not both")
    now = int(time.time())
    end = _when(args.end, "--end") if args.end else now
    if args.start:
        start = _when(args.start, "--start")
    elif args.since:
        start = _when(args.since, "--since")
    else:
        raise InputError("--prometheus", "give the window: --since 7d, or --start TIME [--end TIME] (RFC 3339)")
    if args.power_cap is not None and not args.power_cap > 0:
        raise InputError("--power-cap", f"{args.power_cap:g} is not a power in watts (give e.g. 400)")
    step = None if args.step is None else int(args.step)
    if step is not None and step <= 0:
        raise InputError("--step", f"{step} is not a number of seconds between samples (give 15, 30, 60…)")
    chunk = int(round(args.chunk * 3600))
    if step is not None:
        chunk = max(step, int(round(args.chunk * 3600 / step)) * step)
    bars: dict[str, Any] = {}

    def bar(done: int, total: int) -> None:  # the number of chunks to fetch is known only once the cache is read
        if "b" not in bars:
            bars["b"] = count_progress(total, "fetching time chunks from Prometheus")
        if bars["b"]:
            bars["b"](done)
    report = build_ledger_report(
        args.prometheus, start, end, step_s=step, chunk_s=chunk, gpus_per_query=args.gpus_per_query,
        parallel=args.parallel_queries,
        selector=args.selector, group_label=args.group_label,
        pricing=Pricing(override=args.price_per_gpu_hour, user=read_price_table(args.prices)),
        cache_path=None if args.no_cache else args.cache, token_file=args.bearer_token_file,
        basic_auth_file=args.basic_auth_file, ca_file=args.ca_file, verify=not args.insecure_skip_verify,
        progress=bar if sys.stderr.isatty() else None, power_cap_w=args.power_cap)
    from gpusleuth.render.formats import LEDGER_FORMATS, RenderOptions, stream_format

    if args.html:
        emit(LEDGER_FORMATS, "html", report, out=args.html)
    if args.grafana_summary:
        emit(LEDGER_FORMATS, "grafana", report, out=args.grafana_summary)
    emit(LEDGER_FORMATS, stream_format(json=args.json, csv=args.csv), report, RenderOptions(limit=args.limit))
    return 0
