"""``gpusleuth bench MODULE:FACTORY --batch 1,2,4,…``: latency and throughput per batch size, and the knee."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpusleuth.cli.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "bench",
        help="inference benchmark: throughput and p50/p95/p99 latency per batch size, the knee within a p95 budget",
        description=(
            "Import MODULE, call FACTORY() and benchmark what it returns: a callable taking a batch, or an "
            "object with preprocess/infer/postprocess methods (each stage is then timed). An optional "
            "make_batch(b) method builds the input outside the timing; without it the callable receives the "
            "batch size. Per batch size: warm-up, then throughput, latency p50/p95/p99, peak memory, device "
            "utilization (NVML, on a GPU) and CPU per item; then the knee — the largest batch that still "
            "improves throughput within --p95-budget-ms and the memory limit — and under-/over-batched signs."
        ),
        epilog="Example: gpusleuth bench serving:make_model --batch 1,2,4,8,16,32,64 --p95-budget-ms 40",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="MODULE:FACTORY", help="what to benchmark (imported from the current directory)")
    p.add_argument("--batch", default="1,2,4,8,16,32", metavar="B1,B2,…", help="batch sizes (default 1,2,4,8,16,32)")
    p.add_argument("--p95-budget-ms", type=float, default=None, metavar="MS", help="p95 latency budget per batch call")
    p.add_argument("--mem-limit", default=None, metavar="SIZE",
                   help="peak memory limit (default: 90%% of the GPU's memory; none on CPU)")
    p.add_argument("--warmup", type=int, default=3, metavar="N", help="untimed calls per batch size (default 3)")
    p.add_argument("--seconds", type=float, default=1.0, metavar="S", help="timed seconds per batch size (default 1)")
    p.add_argument("--min-calls", type=int, default=20, metavar="N", help="timed calls per batch size at least (default 20)")
    p.add_argument("--max-calls", type=int, default=2000, metavar="N", help="timed calls per batch size at most")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.set_defaults(func=bench_command)


def bench_command(args: argparse.Namespace) -> int:
    from gpusleuth.render.text import SafeConsole

    from gpusleuth.cli.sweep import parse_size
    from gpusleuth.errors import LaunchError
    from gpusleuth.experiments.bench import bench, load_target
    from gpusleuth.experiments.runner import clean

    try:
        batches = [int(b) for b in args.batch.split(",") if b.strip()]
        if not batches or min(batches) < 1:
            raise ValueError
    except ValueError:
        raise LaunchError(f"gpusleuth bench: --batch wants positive integers like 1,2,4,8, got {args.batch!r}") from None
    if args.seconds <= 0 or args.min_calls < 1 or args.max_calls < args.min_calls:
        raise LaunchError("gpusleuth bench: need --seconds > 0 and 1 <= --min-calls <= --max-calls")
    target, name = load_target(args.target)
    err = SafeConsole(stderr=True, highlight=False)
    res = bench(target, sorted(set(batches)), warmup=args.warmup, min_calls=args.min_calls, max_calls=args.max_calls,
                seconds=args.seconds, p95_budget_ms=args.p95_budget_ms, mem_limit_bytes=parse_size(args.mem_limit),
                name=name, progress=lambda m: err.print(m, markup=False))
    if args.json:
        sys.stdout.write(json.dumps(clean(res.to_dict()), indent=1, default=str) + "\n")
    else:
        from gpusleuth.render.sweep_console import render_bench

        render_bench(res, SafeConsole(highlight=False, width=None if sys.stdout.isatty() else 140))
    return 0 if any(not r.error for r in res.batches) else 1
