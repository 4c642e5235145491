"""What ``gpusleuth bench`` measured: one row per batch size, and the benchmark with its knee and signs.

A leaf: the benchmark that fills these (``bench.py``), the signs read from them (``signs.py``) and the
renderer (``render/sweep_console.py``) import it (and the signs' type, ``Sign``, lives here with them), and it imports none of them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gpusleuth.experiments.stats import Knee


@dataclass
class Sign:
    kind: str  # "under-batched" | "over-batched" | "preprocessing-bound"
    text: str
    evidence: list[str] = field(default_factory=list)


@dataclass
class BatchResult:
    batch: int
    calls: int = 0
    items_per_s: float | None = None
    latency_ms: dict[str, float] | None = None  # p50, p95, p99, mean, min, max
    stages_ms: dict[str, dict[str, float]] | None = None  # stage → p50, p95, mean, share of latency
    peak_mem_bytes: float | None = None
    mem_source: str | None = None
    device_util_mean: float | None = None
    cpu_ms_per_item: float | None = None  # this process's CPU time per item
    admissible: bool = True
    why_not: str = ""
    error: str | None = None


@dataclass
class BenchResult:
    target: str
    device: str
    p95_budget_ms: float | None
    mem_limit_bytes: float | None
    batches: list[BatchResult]
    knee: Knee | None = None
    signs: list[Sign] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "gpusleuth.bench/1", "target": self.target, "device": self.device,
            "p95_budget_ms": self.p95_budget_ms, "mem_limit_bytes": self.mem_limit_bytes,
            "batches": [asdict(b) for b in self.batches],
            "knee": self.knee.to_dict() if self.knee else None,
            "signs": [asdict(s) for s in self.signs], "notes": self.notes,
        }
