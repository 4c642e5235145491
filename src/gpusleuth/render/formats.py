"""Every output format, chosen by name in one place (issue 35 item 4).

A result a verb prints or writes — a :class:`Report`, a :class:`ComparisonReport`, a :class:`Fleet`, a
:class:`LedgerReport` — has a table of :class:`OutputFormat` records keyed by format name (``text``, ``json``,
``csv``, ``html``, …). Each record's ``render`` follows one typed protocol, :class:`Renderer`: the result and
the :class:`RenderOptions` in, the finished text out; the record says where that text goes (``dest``: the
console's stream, stdout, or a file the user named). The renderer of each format stays in its own module
(``render/json_report.py``, ``render/html.py``, ``ledger/render/csv_out.py`` …); the functions here only adapt
those to the protocol, importing each module when its format is asked for (a terminal report never loads the
HTML page's code). ``cli/output.emit`` writes what a record renders; a verb maps its flags to a format name and
never names a renderer module. A new format is one renderer module and one record here.

Not here, because they render no result alone: the Perfetto annotation (``render/perfetto.py`` streams the
source trace beside the analysis), the live view (``render/live.py``, redrawn as a run is written) and the
experiment trackers (``render/trackers/``: a tracker's run folder).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypeVar

if TYPE_CHECKING:
    from rich.console import Console

    from gpusleuth.ledger.report import LedgerReport
    from gpusleuth.report.comparison import ComparisonReport
    from gpusleuth.report.fleet import Fleet
    from gpusleuth.report.model import Report

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)

Dest = Literal["console", "stdout", "file"]  # the console's stream (stdout, or stderr for `run`), stdout, a path


@dataclass(frozen=True)
class RenderOptions:
    """What a renderer may be told besides its result; each format reads only what it uses."""

    console: Console | None = None  # where a text format draws (its width and colours); None: 120 columns, plain
    verbose: bool = False  # text report: every rule that could not run, not one line per missing source
    limit: int | None = None  # ledger text: rows shown per table


class Renderer(Protocol[T_contra]):
    """One format of one kind of result: the finished text (a page, a JSON document, a terminal's bytes)."""

    def __call__(self, result: T_contra, options: RenderOptions, /) -> str: ...


@dataclass(frozen=True)
class OutputFormat(Generic[T]):
    name: str  # what a verb asks for: text, json, csv, html, grafana, serving
    render: Renderer[T]
    dest: Dest
    what: str  # the output in a sentence ("HTML report"): the written/cannot-write messages of a file format
    announce: bool = True  # a file format: say on stderr where it was written and its size


def _drawn(options: RenderOptions, draw: Callable[[Console], None]) -> str:
    """A text format's bytes: drawn on the options' console (or a plain 120-column one) and captured, so that
    the console's width and colour system make them exactly as printing directly would."""
    from gpusleuth.render.text import SafeConsole

    console = options.console or SafeConsole(highlight=False, width=120)
    with console.capture() as captured:
        draw(console)
    return captured.get()


# --- a run's Report (report, run, load, demo) ---

def report_text(report: Report, options: RenderOptions) -> str:
    from gpusleuth.render.console import render_console

    return _drawn(options, lambda c: render_console(report, c, verbose=options.verbose))


def report_serving_text(report: Report, options: RenderOptions) -> str:
    """A server loaded by URL alone (`load` without a command): its serving section and the losses."""
    from gpusleuth.serving.render.console import render_serving

    def draw(console: Console) -> None:
        render_serving(report, console)
        for msg in report.losses:
            console.print(f"  • {msg}", markup=False)

    return _drawn(options, draw)


def report_json(report: Report, options: RenderOptions) -> str:
    from gpusleuth.render.json_report import render_json

    return render_json(report) + "\n"


def report_html(report: Report, options: RenderOptions) -> str:
    from gpusleuth.render.html import render_html

    return render_html(report)


# --- a comparison (compare) ---

def comparison_text(cr: ComparisonReport, options: RenderOptions) -> str:
    from gpusleuth.render.compare_console import render_compare

    return _drawn(options, lambda c: render_compare(cr, c))


def comparison_json(cr: ComparisonReport, options: RenderOptions) -> str:
    from gpusleuth.render.compare_json import render_compare_json

    return render_compare_json(cr) + "\n"


def comparison_html(cr: ComparisonReport, options: RenderOptions) -> str:
    from gpusleuth.render.html_compare import render_compare_html

    return render_compare_html(cr)


# --- many runs' table (fleet DIR…) ---

def fleet_text(fleet: Fleet, options: RenderOptions) -> str:
    from gpusleuth.render.fleet_console import render_fleet_console

    return _drawn(options, lambda c: render_fleet_console(fleet, c))


def fleet_json(fleet: Fleet, options: RenderOptions) -> str:
    from gpusleuth.render.fleet_console import render_fleet_json

    return render_fleet_json(fleet) + "\n"


def fleet_csv(fleet: Fleet, options: RenderOptions) -> str:
    from gpusleuth.render.fleet_console import render_fleet_csv

    return render_fleet_csv(fleet)


def fleet_html(fleet: Fleet, options: RenderOptions) -> str:
    from gpusleuth.render.html_fleet import render_fleet_html

    return render_fleet_html(fleet)


# --- a cluster's ledger (fleet --prometheus) ---

def ledger_text(report: LedgerReport, options: RenderOptions) -> str:
    from gpusleuth.ledger.render.console import render_ledger_console

    limit = options.limit if options.limit is not None else 20
    return _drawn(options, lambda c: render_ledger_console(report, c, limit=limit))


def ledger_json(report: LedgerReport, options: RenderOptions) -> str:
    from gpusleuth.ledger.render.json_out import render_ledger_json

    return render_ledger_json(report) + "\n"


def ledger_csv(report: LedgerReport, options: RenderOptions) -> str:
    from gpusleuth.ledger.render.csv_out import render_ledger_csv

    return render_ledger_csv(report)


def ledger_html(report: LedgerReport, options: RenderOptions) -> str:
    from gpusleuth.ledger.render.html import render_ledger_html

    return render_ledger_html(report)


def ledger_grafana(report: LedgerReport, options: RenderOptions) -> str:
    from gpusleuth.ledger.render.grafana import render_ledger_grafana

    return render_ledger_grafana(report)


def _table(*formats: OutputFormat[T]) -> Mapping[str, OutputFormat[T]]:
    table = {f.name: f for f in formats}
    assert len(table) == len(formats), "two formats of one result share a name"
    return table


REPORT_FORMATS: Mapping[str, OutputFormat[Report]] = _table(
    OutputFormat("text", report_text, "console", "report"),
    OutputFormat("serving", report_serving_text, "console", "serving report"),
    OutputFormat("json", report_json, "stdout", "JSON report"),
    OutputFormat("html", report_html, "file", "HTML report"),
)
COMPARISON_FORMATS: Mapping[str, OutputFormat[ComparisonReport]] = _table(
    OutputFormat("text", comparison_text, "console", "comparison"),
    OutputFormat("json", comparison_json, "stdout", "JSON comparison"),
    OutputFormat("html", comparison_html, "file", "comparison page"),
)
FLEET_FORMATS: Mapping[str, OutputFormat[Fleet]] = _table(
    OutputFormat("text", fleet_text, "console", "fleet table"),
    OutputFormat("json", fleet_json, "stdout", "fleet JSON"),
    OutputFormat("csv", fleet_csv, "stdout", "fleet CSV"),
    OutputFormat("html", fleet_html, "file", "fleet page"),
)
LEDGER_FORMATS: Mapping[str, OutputFormat[LedgerReport]] = _table(
    OutputFormat("text", ledger_text, "console", "ledger"),
    OutputFormat("json", ledger_json, "stdout", "ledger JSON"),
    OutputFormat("csv", ledger_csv, "stdout", "ledger CSV"),
    OutputFormat("html", ledger_html, "file", "fleet page"),
    OutputFormat("grafana", ledger_grafana, "file", "Grafana summary", announce=False),
)

# every result kind a verb prints, with its formats: the one registry (tests/test_registries.py walks it)
FORMATS: Mapping[str, Mapping[str, OutputFormat[Report]] | Mapping[str, OutputFormat[ComparisonReport]]
                 | Mapping[str, OutputFormat[Fleet]] | Mapping[str, OutputFormat[LedgerReport]]] = {
    "report": REPORT_FORMATS, "comparison": COMPARISON_FORMATS, "fleet": FLEET_FORMATS, "ledger": LEDGER_FORMATS,
}


def stream_format(json: bool = False, csv: bool = False) -> str:
    """The printed format a verb's flags ask for: ``--json``, ``--csv``, else the terminal's text."""
    return "json" if json else "csv" if csv else "text"
