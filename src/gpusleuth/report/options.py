"""The command-line flags for :class:`~gpusleuth.analysis.options.AnalysisOptions` (`report`, `run`, `compare`)."""

from __future__ import annotations

from pathlib import Path

from gpusleuth.analysis.options import AnalysisOptions


def add_report_options(parser) -> None:
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


def options_from_args(args) -> AnalysisOptions:
    return AnalysisOptions(
        price_per_gpu_hour=args.price_per_gpu_hour, prices_file=args.prices, peak_tflops=args.peak_tflops,
        peak_dtype=args.peak_dtype, flops_per_step=args.flops_per_step, params=args.params,
        target=args.target, mllog=args.mllog,
    )


__all__ = ["AnalysisOptions", "add_report_options", "options_from_args"]
