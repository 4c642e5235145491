"""What the user told the report stage: prices, peaks, FLOPs, a quality target, an MLLOG file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class ReportOptions:
    price_per_gpu_hour: float | None = None
    prices_file: Path | None = None
    peak_tflops: float | None = None
    peak_dtype: str = "bf16"
    flops_per_step: float | None = None
    params: float | None = None
    target: str | None = None  # e.g. "accuracy>=0.9"
    mllog: Path | None = None


    def to_meta(self) -> dict:
        """The options worth remembering with a run, so a later `gpusleuth report` uses them too."""
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()
                if v is not None and not (k == "peak_dtype" and v == "bf16")}

    def merged_with(self, saved: dict | None) -> "ReportOptions":
        """Options given now win; those saved at `run` time fill the gaps."""
        if not saved:
            return self
        out = ReportOptions(**self.__dict__)
        for k, v in saved.items():
            if not hasattr(out, k):
                continue
            current = getattr(out, k)
            if current is None or (k == "peak_dtype" and current == "bf16"):
                setattr(out, k, Path(v) if k in ("prices_file", "mllog") else v)
        return out


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


def options_from_args(args) -> ReportOptions:
    return ReportOptions(
        price_per_gpu_hour=args.price_per_gpu_hour, prices_file=args.prices, peak_tflops=args.peak_tflops,
        peak_dtype=args.peak_dtype, flops_per_step=args.flops_per_step, params=args.params,
        target=args.target, mllog=args.mllog,
    )
