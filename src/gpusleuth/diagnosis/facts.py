"""Everything the rules may look at, computed once by the analysis stage.

Rules take a :class:`Facts` and return findings; they never read files or the raw Run tables, so each
rule stays a small pure function that can be tested on numbers alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpusleuth.analysis.outcomes import Outcomes
from gpusleuth.analysis.telemetry import GpuSummary, HostSummary


@dataclass
class Facts:
    outcomes: Outcomes
    gpus: list[GpuSummary]
    host: HostSummary | None
    gpu_note: str | None  # why there is no GPU telemetry, if there is none
    dataloaders: list[dict[str, Any]] = field(default_factory=list)  # configs the hook saw
    logical_cores: int | None = None
