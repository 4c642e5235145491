"""Output formats are records chosen by name (issue 35 item 4): ``render/formats.py`` holds every format of every
result a verb prints, each a :class:`Renderer` (result, options → text); ``cli/output.emit`` writes it where the
record says. Checked here: the records, that the terminal's bytes through the registry are the bytes of drawing
directly (width and colours included), where each kind of format goes, and that no verb names a renderer
module itself (AST, like tests/test_house_rules.py)."""

from __future__ import annotations

import ast
import io
import typing
from pathlib import Path

import pytest

from gpusleuth.render.formats import FORMATS, REPORT_FORMATS, Dest, RenderOptions, stream_format

PKG = Path(__file__).resolve().parents[1] / "src" / "gpusleuth"
FIXTURE = Path(__file__).parent / "fixtures" / "loader_runs" / "one_worker"


@pytest.fixture(scope="module")
def report():
    from gpusleuth.pipeline.build import build_report
    from gpusleuth.sources.inputs import read_inputs

    return build_report(read_inputs([FIXTURE]).job, display=True)


def test_every_result_has_named_formats_and_every_flag_a_record():
    for kind, table in FORMATS.items():
        assert table and all(name == f.name for name, f in table.items()), kind
        assert all(f.dest in typing.get_args(Dest) and f.what and callable(f.render) for f in table.values())
        # what a verb's flags can ask for exists: the terminal's text and --json everywhere, --html everywhere
        assert {stream_format(), stream_format(json=True), "html"} <= set(table), kind
    assert "csv" in FORMATS["fleet"] and "csv" in FORMATS["ledger"]  # the verbs with --csv


def _terminal(buf: io.StringIO):
    from gpusleuth.render.text import SafeConsole

    return SafeConsole(file=buf, highlight=False, width=97, force_terminal=True, color_system="256")


def test_the_terminal_gets_the_bytes_of_drawing_directly(report):
    from gpusleuth.cli.output import emit
    from gpusleuth.render.console import render_console

    direct, through = io.StringIO(), io.StringIO()
    render_console(report, _terminal(direct), verbose=True)
    emit(REPORT_FORMATS, "text", report, RenderOptions(console=_terminal(through), verbose=True))
    assert "\x1b[" in direct.getvalue() and "─" * 20 in direct.getvalue()  # colours and a 97-column rule
    assert through.getvalue() == direct.getvalue()


def test_each_format_goes_where_its_record_says(report, tmp_path, capsys):
    from gpusleuth.cli.output import emit
    from gpusleuth.errors import InputError

    console_buf = io.StringIO()
    emit(REPORT_FORMATS, "text", report, RenderOptions(console=_terminal(console_buf)))
    emit(REPORT_FORMATS, "json", report, RenderOptions(console=_terminal(console_buf)))
    out = capsys.readouterr()
    assert out.out.startswith("{") and out.out.endswith("}\n") and "gpusleuth report" in console_buf.getvalue()
    assert "{" not in console_buf.getvalue()[:1]  # the JSON went to stdout, not to the console

    page = tmp_path / "r.html"
    emit(REPORT_FORMATS, "html", report, out=page)
    assert page.read_text().startswith("<!DOCTYPE html>") and "HTML report written to" in capsys.readouterr().err
    with pytest.raises(InputError, match="cannot write the HTML report"):
        emit(REPORT_FORMATS, "html", report, out=tmp_path / "no" / "such" / "dir.html")
    with pytest.raises(ValueError, match="give its path"):
        emit(REPORT_FORMATS, "html", report)


def _format_modules() -> set[str]:
    """The renderer modules the registry adapts: what its functions import."""
    tree = ast.parse((PKG / "render" / "formats.py").read_text())
    return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
            and n.module.startswith("gpusleuth.") and ".render" in n.module and n.module != "gpusleuth.render.text"}


def test_verbs_pick_a_format_by_name_never_a_renderer():
    modules = _format_modules()
    assert {"gpusleuth.render.json_report", "gpusleuth.render.console", "gpusleuth.ledger.render.csv_out"} <= modules
    bad = []
    for path in sorted((PKG / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in modules:
                names = {a.name for a in node.names}
                if node.module == "gpusleuth.render.html" and names <= {"write_page"}:
                    continue  # writing a page's bytes, not choosing its renderer
                bad.append(f"cli/{path.name}:{node.lineno} imports {sorted(names)} from {node.module}")
    assert not bad, "a verb names a renderer; pick it by name from render/formats.py:\n" + "\n".join(bad)
