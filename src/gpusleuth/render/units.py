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
