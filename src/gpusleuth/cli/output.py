"""What the verbs write besides their work: the console (a SafeConsole: untrusted text shown inert), the
printed report (terminal or JSON), transient progress bars on stderr, and HTML pages written as one file."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from gpusleuth.errors import InputError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import ProgressColumn

    from gpusleuth.render.text import SafeConsole
    from gpusleuth.report.model import Report

T = TypeVar("T")
Tick = Callable[[int, int], None]  # a bar's ``update(done, total)``: the progress a pass reports to


def make_console(to_stderr: bool = False) -> SafeConsole:
    """A terminal keeps its width; a file or pipe gets 120 columns so tables stay readable."""
    from gpusleuth.render.text import SafeConsole

    stream = sys.stderr if to_stderr else sys.stdout
    return SafeConsole(file=stream, highlight=False, width=None if stream.isatty() else 120)


def emit_report(report: Report, as_json: bool, to_stderr: bool = False, verbose: bool = False) -> None:
    if as_json:
        from gpusleuth.render.json_report import render_json

        sys.stdout.write(render_json(report) + "\n")
    else:
        from gpusleuth.render.console import render_console


        render_console(report, make_console(to_stderr), verbose=verbose)


def write_html_report(report: Report, out: Path) -> None:
    from gpusleuth.render.html import render_html

    write_html_file(render_html, report, out, "HTML report")


def write_html_file(render: Callable[[T], str], obj: T, out: Path, what: str) -> None:
    """Render ``obj`` to a page and write it; a path that cannot be written is one sentence, not a traceback."""
    from gpusleuth.render.html import write_page

    try:
        size = write_page(render(obj), out)
    except OSError as exc:
        raise InputError(out, f"cannot write the {what}: {exc.strerror or exc}") from None
    print(f"gpusleuth: {what} written to {out} ({size / 2**20:.1f} MiB)", file=sys.stderr)


def set_progress(total: int, unit: str) -> Tick | None:
    """A trace set's bar on a terminal: over ranks analysed by workers, or over bytes read here (big sets)."""
    if unit == "ranks":
        return rank_progress(total)
    from rich.progress import DownloadColumn

    if total < 20 * 2**20:
        return None
    return _transient_bar("loading traces", total, DownloadColumn())


def rank_progress(total: int, what: str = "analysing") -> Tick | None:
    """A transient rich bar over ranks (only worth showing for several)."""
    return count_progress(total, f"{what} ranks")


def count_progress(total: int, label: str) -> Tick | None:
    """A transient rich bar over ``total`` items (ranks, runs), on stderr; None for fewer than two."""
    if total < 2:
        return None
    from rich.progress import MofNCompleteColumn

    return _transient_bar(label, total, MofNCompleteColumn(), console=make_console(to_stderr=True))


def _transient_bar(label: str, total: int, count_column: ProgressColumn, console: Console | None = None) -> Tick:
    """Start a bar that disappears when done; returns ``update(done, total=None)``."""
    from rich.progress import BarColumn, Progress, TextColumn

    bar = Progress(TextColumn(label), BarColumn(), count_column, transient=True, console=console)
    task = bar.add_task(label, total=total)
    bar.start()

    def update(done: int, _total: int | None = None) -> None:
        bar.update(task, completed=done)
        if done >= total:
            bar.stop()

    return update
