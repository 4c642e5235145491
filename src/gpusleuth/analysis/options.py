"""What the user told the analysis: prices, peaks, FLOPs, a quality target, an MLLOG file.

A plain dataclass (no argparse: the CLI's flags that fill it live in ``report/options.py``), so the
analysis, the report, compare and sweeps share one set of options.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class AnalysisOptions:
    price_per_gpu_hour: float | None = None
    prices_file: Path | None = None
    peak_tflops: float | None = None
    peak_dtype: str = "bf16"
    flops_per_step: float | None = None
    params: float | None = None
    target: str | None = None  # e.g. "accuracy>=0.9"
    mllog: Path | None = None


    def to_meta(self) -> dict[str, Any]:
        """The options worth remembering with a run, so a later `gpusleuth report` uses them too."""
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()
                if v is not None and not (k == "peak_dtype" and v == "bf16")}

    def merged_with(self, saved: dict[str, Any] | None) -> "AnalysisOptions":
        """Options given now win; those saved at `run` time fill the gaps."""
        if not saved:
            return self
        out = AnalysisOptions(**self.__dict__)
        for k, v in saved.items():
            if not hasattr(out, k):
                continue
            current = getattr(out, k)
            if current is None or (k == "peak_dtype" and current == "bf16"):
                setattr(out, k, Path(v) if k in ("prices_file", "mllog") else v)
        return out
