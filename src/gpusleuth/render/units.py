"""Number formatting shared by the renderers (terminal, HTML, sweep tables)."""

from __future__ import annotations

import math


def human_bytes(b: float | None) -> str:
    """1536 → '1.5 KiB'; None → '–'."""
    if b is None:
        return "–"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{b:.0f} B"


def dollars(v: float) -> str:
    """$ amounts down to fractions of a cent keep 3 significant figures ($0.000415, not $0.0004)."""
    if not v or abs(v) >= 0.995:
        return f"${v:,.2f}"
    return f"${v:.{max(2, 2 - math.floor(math.log10(abs(v))))}f}"


def metric_text(metric: str, v: float | None) -> str:
    """A ``gpusleuth compare`` metric (analysis/compare.METRICS) in its natural unit; None → '–'."""
    if v is None:
        return "–"
    if metric in ("goodput", "data_wait", "mfu"):
        return f"{v:.1%}"
    if metric in ("step_time", "step_time_p95"):
        return f"{v * 1e3:.2f} ms"
    if metric == "cost_per_1k":
        return dollars(v)
    return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
