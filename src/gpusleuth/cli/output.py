"""What the verbs write besides their work: the console (a SafeConsole: untrusted text shown inert), the
output formats chosen by name (``emit``: terminal, JSON, CSV on their streams; HTML and other pages written as
one file), transient progress bars on stderr."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from gpusleuth.errors import InputError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import ProgressColumn

    from gpusleuth.render.formats import OutputFormat, RenderOptions
    from gpusleuth.render.text import SafeConsole

T = TypeVar("T")
Tick = Callable[[int, int], None]  # a bar's ``update(done, total)``: the progress a pass reports to


def make_console(to_stderr: bool = False) -> SafeConsole:
    """A terminal keeps its width; a file or pipe gets 120 columns so tables stay readable."""
    from gpusleuth.render.text import SafeConsole

    stream = sys.stderr if to_stderr else sys.stdout
    return SafeConsole(file=stream, highlight=False, width=None if stream.isatty() else 120)


def emit(formats: Mapping[str, OutputFormat[T]], name: str, result: T, options: RenderOptions | None = None,
         out: Path | None = None) -> None:
    """Render ``result`` in the format called ``name`` (``render/formats.py``) and write it where the format goes:
    a text format to its console's stream (``make_console()`` unless the options hold one), a printed format to
    stdout, a file format to ``out`` (a path that cannot be written is one sentence, not a traceback)."""
    from gpusleuth.render.formats import RenderOptions

    fmt = formats[name]
    options = options or RenderOptions()
    if fmt.dest == "file":
        from gpusleuth.render.html import write_page

        if out is None:
            raise ValueError(f"the {fmt.what} is written to a file: give its path")
        try:
            size = write_page(fmt.render(result, options), out)
        except OSError as exc:
            raise InputError(out, f"cannot write the {fmt.what}: {exc.strerror or exc}") from None
        if fmt.announce:
            print(f"gpusleuth: {fmt.what} written to {out} ({size / 2**20:.1f} MiB)", file=sys.stderr)
    elif fmt.dest == "console":
        if options.console is None:
            options = replace(options, console=make_console())
        assert options.console is not None
        stream = options.console.file
        stream.write(fmt.render(result, options))
        stream.flush()
    else:
        sys.stdout.write(fmt.render(result, options))


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
