"""The HTML page being assembled, in a leaf module: every HTML renderer (the report's, serving's, the ledger's)
adds to a ``Page``, and html.py draws the serving sections, so a ``Page`` defined in html.py made html.py and
html_serving.py import each other."""

from __future__ import annotations

from typing import Any


class Page:
    """The page being assembled: HTML fragments (already escaped) and the figures they reference."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.figures: dict[str, dict[str, Any]] = {}

    def add(self, s: str) -> None:
        self.parts.append(s)

    def figure(self, fig: dict[str, Any] | None, css: str = "fig") -> None:
        if fig is None:
            return
        fid = f"fig-{len(self.figures) + 1}"
        self.figures[fid] = fig
        self.add(f'<div class="{css}" id="{fid}"></div>')
