"""Terminal rendering of ``gpusleuth compare``: formatting only."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpusleuth.analysis.compare import METRICS
from gpusleuth.report.comparison import ComparisonReport
from gpusleuth.render.units import dollars, metric_text


def render_compare(cr: ComparisonReport, console: Console) -> None:
    c = cr.comparison
    t = Table(title="Runs compared (deltas vs the first run)")
    t.add_column("metric")
    for i, col in enumerate(c.runs):
        t.add_column(escape(col.label) + (" (baseline)" if i == 0 else ""), justify="right")
    for k, (label, higher_better) in METRICS.items():
        if all(col.metrics.get(k) is None for col in c.runs):
            continue
        cells = []
        for i, col in enumerate(c.runs):
            cell = metric_text(k, col.metrics.get(k))
            d = c.deltas[i].get(k)
            if i and d is not None:
                good = (d > 0) == higher_better
                noise = c.beyond_noise[i].get(k)
                style = "dim" if noise is False else ("green" if good else "red")
                cell += f" [{style}]({d:+.1%}{', noise' if noise is False else ''})[/]"
            cells.append(cell)
        t.add_row(label, *cells)
    t.add_row("processes / GPUs", *[str(col.processes) for col in c.runs])
    console.print(t)
    for i, band in enumerate(c.noise_band[1:], 1):
        if band is not None:
            note = c.noise_notes[i] if i < len(c.noise_notes) and c.noise_notes[i] else ""
            console.print(f"  noise band for {escape(c.runs[i].label)}: ±{band:.1%} on step time — {note}")
    for s in c.scaling:
        console.print(f"  scaling {s['from']} → {s['to']} processes ({escape(s['run'])}): efficiency "
                      f"[bold]{s['efficiency']:.0%}[/] — {s['regime']}; {s['formula']}")
        if "verdict" in s:
            a, b = s["per_1k"]
            money = s["per_1k_unit"].startswith("$")
            fmt = dollars if money else (lambda x: f"{x:,.3g}")
            unit = "per 1k samples" if money else s["per_1k_unit"]
            style = "bold red" if s["cost_outpaces_time"] else "green"
            console.print(f"    {fmt(a)} → {fmt(b)} {unit}; [{style}]{escape(s['verdict'])}[/]")
    for g in c.gates:
        mark = "[bold red]FAIL[/]" if g.failed else "[green]pass[/]"
        said = "" if g.beyond_noise is None else (" (beyond noise)" if g.beyond_noise else " (within noise)")
        console.print(f"  gate {escape(g.gate)} on {escape(g.run)}: {mark} — {escape(g.detail)}{said}")
    _findings(cr, console)


def _findings(cr: ComparisonReport, console: Console) -> None:
    """The top finding of each run: whether a fix removed the cause, and what leads now."""
    console.print("  top finding per run:")
    for i, v in enumerate(cr.views):
        ranked = [f for f in v.findings if f.severity != "none"]
        if ranked:
            f = ranked[0]
            gain = f", ≈{f.wall_share:.0%} of wall time" if f.wall_share else ""
            what = f"[bold]{escape(f.cause)}[/] ({f.severity}{gain}) — {escape(f.title)}"
        elif v.findings:
            what = f"[green]{escape(v.findings[0].cause)}[/] — {escape(v.findings[0].title)}"
        else:
            what = "[dim]no findings[/]"
        console.print(f"    {escape(v.label)}{' (baseline)' if i == 0 else ''}: {what}")
