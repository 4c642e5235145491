"""Every flag a verb shares, and turning parsed flags into options objects: the analysis's
(``AnalysisOptions``: prices, peaks, FLOPs, target), the importers' (``ImportOptions``), the file outputs
(--html, --annotate) and a trace set's parallelism. Verbs call ``add_*`` on their parser and the
``*_options(args)`` below; nothing else reads ``args`` for these."""

from __future__ import annotations

from typing import TYPE_CHECKING

import argparse
from pathlib import Path

from gpusleuth.analysis.options import AnalysisOptions
from gpusleuth.errors import InputError

if TYPE_CHECKING:
    from gpusleuth.sources.detect import ImportOptions

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]  # what each command's add_parser gets


def add_analysis_options(parser: argparse.ArgumentParser) -> None:
    """The same options on `report`, `run` and `compare`."""
    g = parser.add_argument_group("outcomes (MFU, cost, time to target)")
    g.add_argument("--price-per-gpu-hour", type=float, default=None, metavar="USD",
                   help="price of one GPU-hour (default: dated table by GPU model; on a CPU-only run, the "
                   "machine's price per hour)")
    g.add_argument("--prices", type=Path, default=None, metavar="FILE",
                   help='JSON price table overriding the defaults, e.g. {"H100 SXM": 2.5}')
    g.add_argument("--peak-tflops", type=float, default=None, metavar="T",
                   help="dense peak TFLOP/s per device for MFU (default: table by GPU model and --peak-dtype)")
    g.add_argument("--peak-dtype", default="bf16", choices=("bf16", "fp16", "tf32", "fp32", "fp8"),
                   help="which dense peak MFU is measured against (default bf16, the common convention)")
    g.add_argument("--flops-per-step", type=float, default=None, metavar="F",
                   help="model FLOPs per training step (default: measured once by the hook with FlopCounterMode)")
    g.add_argument("--params", type=float, default=None, metavar="N",
                   help="model parameters N: MFU uses 6·N·tokens per step (transformers that log tokens)")
    g.add_argument("--target", default=None, metavar="METRIC>=VALUE",
                   help="quality target for time-to-target, e.g. 'accuracy>=0.9' or 'eval_accuracy>=0.759'")
    g.add_argument("--mllog", type=Path, default=None, metavar="FILE",
                   help="a file of MLPerf ':::MLLOG' lines (default: the run's captured output, if any)")


def analysis_options(args: argparse.Namespace) -> AnalysisOptions:
    return AnalysisOptions(
        price_per_gpu_hour=args.price_per_gpu_hour, prices_file=args.prices, peak_tflops=args.peak_tflops,
        peak_dtype=args.peak_dtype, flops_per_step=args.flops_per_step, params=args.params,
        target=args.target, mllog=args.mllog,
    )


def add_import_options(p: argparse.ArgumentParser) -> None:
    """The options of ``report`` and ``import`` that only imported files need."""
    g = p.add_argument_group("imported files (nvidia-smi, dmon, Nsight Systems, DCGM/Prometheus)")
    g.add_argument("--fields", default=None, metavar="LIST",
                   help="the --query-gpu field list of a header-less nvidia-smi log, e.g. "
                   "timestamp,index,utilization.gpu,memory.used (default: inferred from the values)")
    g.add_argument("--tz", default=None, metavar="ZONE",
                   help="time zone of nvidia-smi's local timestamps, e.g. Europe/Berlin (default: this machine's)")
    g.add_argument("--start", default=None, metavar="TIME",
                   help="start of a dmon log printed without -o DT (ISO time, e.g. 2026-05-01T10:00:00+00:00)")
    g.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help="sampling interval of a dmon log without timestamps (dmon -d; default 1)")
    g.add_argument("--step-range", default=None, metavar="NAME",
                   help="the NVTX range that marks one training step in an Nsight Systems export "
                   "(default: ranges named like steps, e.g. 'step 12', 'train_step')")


def import_options(args: argparse.Namespace) -> ImportOptions:
    from gpusleuth.sources.detect import ImportOptions

    start = getattr(args, "start", None)
    start_ns = None
    if start:
        from datetime import datetime

        try:
            start_ns = int(datetime.fromisoformat(start).timestamp() * 1e9)
        except ValueError:
            raise InputError(start, "--start must be an ISO time such as 2026-05-01T10:00:00+00:00") from None
    fields = getattr(args, "fields", None)
    return ImportOptions(fields=[f for f in fields.split(",") if f.strip()] if fields else None,
                         tz=getattr(args, "tz", None), start_ns=start_ns,
                         interval_s=getattr(args, "interval", 1.0) or 1.0,
                         step_range=getattr(args, "step_range", None))


def add_parallel_options(p: argparse.ArgumentParser) -> None:
    """How a trace set's ranks are analysed: in this process, a local pool, or a Ray cluster."""
    g = p.add_argument_group(
        "many ranks (trace sets)",
        "Each trace file is read and analysed on its own and only a small summary per rank comes back, so "
        "the report's memory does not grow with the number of ranks; the cross-rank view is computed from "
        "the summaries. The report is the same whichever way the ranks ran (docs/trace-analysis.md).")
    g.add_argument("--jobs", "-j", type=_positive_int, default=None, metavar="N",
                   help="worker processes for a trace set's ranks (default: as many as ranks, cores and "
                   "memory allow; a small set is analysed in this process, one rank after another); 1: in this process. "
                   "--annotate reads every trace in this process (it copies each one)")
    g.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="analyse the ranks as tasks on a Ray cluster (pip install 'gpusleuth[ray]'): ADDRESS "
                   "of a running cluster (ray://host:10001, or 'auto'), or none to start a local one. Workers "
                   "read the trace files by path: on a remote cluster the paths must be visible on every node "
                   "(a shared filesystem)")


def _positive_int(text: str) -> int:
    import argparse

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return n


def stall_after_value(text: str, verb: str) -> str:
    """``--stall-after`` of ``run`` and ``load``: auto, off, or seconds above 0 (refused before anything starts)."""
    from gpusleuth.errors import LaunchError

    if text in ("auto", "off"):
        return text
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise LaunchError(f"gpusleuth {verb}: --stall-after wants seconds above 0, auto or off, got {text!r}")
    return repr(value)


def add_output_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--html", type=Path, default=None, metavar="OUT",
                   help="also write a self-contained HTML report with charts to OUT (one file, works offline)")
    p.add_argument("--annotate", type=Path, default=None, metavar="OUT",
                   help="write the profiler trace back with tracks that label each idle gap by cause and each "
                   "step's partition (open in ui.perfetto.dev or chrome://tracing); OUT ending in .gz is "
                   "compressed; with several traces OUT is a directory")
