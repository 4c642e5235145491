"""An LLM engine's ``/metrics`` scrape as the Run holds it (``Run.engine``): read by serving/sources/engine_metrics.py,
used by serving/analysis/engine.py."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Histogram:
    """Cumulative bucket counts by upper bound (seconds; the last is +inf), with the sum and the count."""

    bounds: list[float]
    counts: list[float]
    sum: float | None
    count: float


@dataclass
class EngineSample:
    t_ns: int
    engine: str  # vllm / sglang / tgi / llamacpp
    values: dict[str, float] = field(default_factory=dict)  # GAUGES and COUNTERS found in this scrape
    hists: dict[str, Histogram] = field(default_factory=dict)


def histogram_quantile(bounds: list[float], counts: list[float], q: float) -> float | None:
    """Prometheus's ``histogram_quantile``: linear within the bucket that holds the q-th observation (the
    +inf bucket answers with the largest finite bound). None without observations."""
    if not counts or counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    prev_b, prev_c = 0.0, 0.0
    for b, c in zip(bounds, counts):
        if c >= rank:
            if b == float("inf"):
                return prev_b
            return prev_b + (b - prev_b) * ((rank - prev_c) / (c - prev_c) if c > prev_c else 0.0)
        prev_b, prev_c = b, c
    return prev_b


__all__ = ["EngineSample", "Histogram", "histogram_quantile"]
