"""Number formatting shared by the renderers (terminal, HTML, sweep tables)."""

from __future__ import annotations


def human_bytes(b: float | None) -> str:
    """1536 → '1.5 KiB'; None → '–'."""
    if b is None:
        return "–"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(b) >= scale:
            return f"{b / scale:.1f} {unit}"
    return f"{b:.0f} B"


def metric_text(metric: str, v: float | None) -> str:
    """A ``gpusleuth compare`` metric (analysis/compare.METRICS) in its natural unit; None → '–'."""
    if v is None:
        return "–"
    if metric in ("goodput", "data_wait", "mfu"):
        return f"{v:.1%}"
    if metric in ("step_time", "step_time_p95"):
        return f"{v * 1e3:.2f} ms"
    if metric == "cost_per_1k":
        return f"${v:.4f}"
    return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
