"""``gpusleuth run --live``: a compact panel at the bottom of the terminal while the job runs, or plain
periodic lines when the output is not a terminal (CI logs, ``| tee``).

Formatting only: the numbers come from :class:`gpusleuth.report.live.LiveTail`.

Why a scroll region instead of rich's ``Live``: the job owns the terminal and prints whenever it likes,
from another process. ``Live`` redraws by moving the cursor up over its own lines, which would erase
whatever the job printed in between. Instead the panel gets the bottom rows to itself (the terminal's
scroll region, DECSTBM, is set to the rows above it — as apt does for its progress bar): the job's output
scrolls above the panel and is never overdrawn. Each redraw is one ``write`` of save-cursor, draw,
restore-cursor. The panel's contents are rendered by rich.
"""

from __future__ import annotations

import io
import os
import shutil
import time
from pathlib import Path
from typing import TextIO

from gpusleuth.render.text import clip, inert
from gpusleuth.report.live import LiveSnapshot, LiveTail

TTY_REFRESH_S = 0.5  # ≤ 2 Hz
PLAIN_EVERY_S = 5.0


def _fmt(v: float | None, fmt: str, none: str = "–") -> str:
    return none if v is None else fmt.format(v)


def fields(s: LiveSnapshot) -> list[tuple[str, str]]:
    """(label, value) pairs, in the order shown."""
    return [
        ("steps", f"{s.steps:,}"),
        ("step", _fmt(s.step_time_s * 1e3 if s.step_time_s is not None else None, "{:,.1f} ms")),
        ("samples/s", _fmt(s.samples_per_s, "{:,.0f}")),
        ("data wait", _fmt(s.data_wait_share * 100 if s.data_wait_share is not None else None, "{:.0f}%")),
        ("GPU util", _fmt(s.gpu_util, "{:.0f}%") if s.gpus else "no GPU"),
        ("SM active", _fmt(s.sm_active, "{:.0f}%")),
        ("power", _fmt(s.power_w, "{:,.0f} W")),
        ("CPU", _fmt(s.cpu_pct, "{:.0f}%")),
        ("train proc", _fmt(s.main_cpu_pct, "{:.0f}%")),
        ("workers", _fmt(s.workers_cpu_pct, "{:.0f}%")),
        ("stall", f"{s.stall_s:,.0f} s: {clip(inert(s.stall or ''), 160)}" if s.stall_s is not None
         else f"none ({s.stalls} so far)" if s.stalls else "none"),
    ]


def plain_line(s: LiveSnapshot) -> str:
    return "gpusleuth live " + f"{s.elapsed_s:6.0f}s  " + "  ".join(f"{k} {v}" for k, v in fields(s))


class LiveView:
    """Called from the launcher's wait loop via :meth:`tick`; rate-limits itself."""

    def __init__(self, run_dir: Path, stream: TextIO, tty: bool | None = None):
        self.tail = LiveTail(run_dir)
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.next_at = time.monotonic() + (TTY_REFRESH_S if self.tty else PLAIN_EVERY_S)
        self.height = 0
        self.rows = 0
        self.closed = False

    # --- terminal panel ----------------------------------------------------------------------------
    def _size(self) -> tuple[int, int]:
        try:
            sz = os.get_terminal_size(self.stream.fileno())
            return sz.columns, sz.lines
        except (OSError, ValueError, AttributeError):
            sz = shutil.get_terminal_size()
            return sz.columns, sz.lines

    def _panel_lines(self, s: LiveSnapshot, width: int) -> list[str]:
        from gpusleuth.render.text import SafeConsole
        from rich.panel import Panel
        from rich.table import Table

        t = Table.grid(padding=(0, 2))
        items = fields(s)
        stall = items.pop()  # its own line under the grid, red while a stall goes on
        half = (len(items) + 1) // 2
        for _ in range(half):
            t.add_column(no_wrap=True)
        for row in (items[:half], items[half:]):
            t.add_row(*[f"[dim]{k}[/] [bold]{v}[/]" for k, v in row])
        buf = io.StringIO()
        con = SafeConsole(file=buf, width=width, force_terminal=True, color_system="standard", highlight=False)
        from rich.console import Group
        from rich.text import Text

        line = Text(f"{stall[0]} {stall[1]}", style="bold red" if s.stall_s is not None else "dim")
        con.print(Panel(Group(t, line), title=f"gpusleuth live · {s.elapsed_s:,.0f} s", title_align="left",
                        border_style="red" if s.stall_s is not None else "cyan", padding=(0, 1)))
        return buf.getvalue().rstrip("\n").split("\n")

    def _draw(self, s: LiveSnapshot) -> None:
        cols, rows = self._size()
        lines = self._panel_lines(s, max(20, min(cols, 140)))
        h = len(lines)
        if rows < h + 3:
            return  # too small a terminal to share: stay quiet rather than garble the job's output
        out = []
        if h != self.height or rows != self.rows:
            # make room at the bottom, then confine scrolling to the rows above the panel
            out.append("\n" * h + f"\x1b[{h}A" + "\x1b7" + f"\x1b[1;{rows - h}r" + "\x1b8")
            self.height, self.rows = h, rows
        out.append("\x1b7")
        for i, line in enumerate(lines):
            out.append(f"\x1b[{rows - h + 1 + i};1H\x1b[2K{line}")
        out.append("\x1b8")
        self._write("".join(out))

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            self.closed = True

    # --- the launcher's hooks -----------------------------------------------------------------------
    def tick(self) -> None:
        now = time.monotonic()
        if self.closed or now < self.next_at:
            return
        self.next_at = now + (TTY_REFRESH_S if self.tty else PLAIN_EVERY_S)
        s = self.tail.poll()
        if self.tty:
            self._draw(s)
        else:
            self._write(plain_line(s) + "\n")

    def close(self) -> None:
        """Give the whole screen back (scroll region reset, panel rows cleared)."""
        if self.closed:
            return
        self.closed = True
        if self.tty and self.height:
            rows = self.rows
            out = ["\x1b7", "\x1b[r"]
            for i in range(self.height):
                out.append(f"\x1b[{rows - self.height + 1 + i};1H\x1b[2K")
            out.append("\x1b8")
            try:
                self.stream.write("".join(out))
                self.stream.flush()
            except (OSError, ValueError):
                pass
        elif not self.tty:
            s = self.tail.poll()
            try:
                self.stream.write(plain_line(s) + "  (job ended)\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass
