"""Terminal rendering of ``gpusleuth compare``: formatting only."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpusleuth.analysis.compare import METRICS, Comparison


def _fmt(k: str, v: float | None) -> str:
    if v is None:
        return "–"
    if k in ("goodput", "data_wait", "mfu"):
        return f"{v:.1%}"
    if k in ("step_time", "step_time_p95"):
        return f"{v * 1e3:.2f} ms"
    if k == "cost_per_1k":
        return f"${v:.4f}"
    return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"


def render_compare(c: Comparison, console: Console) -> None:
    t = Table(title="Runs compared (deltas vs the first run)")
    t.add_column("metric")
    for i, col in enumerate(c.runs):
        t.add_column(escape(col.label) + (" (baseline)" if i == 0 else ""), justify="right")
    for k, (label, higher_better) in METRICS.items():
        if all(col.metrics.get(k) is None for col in c.runs):
            continue
        cells = []
        for i, col in enumerate(c.runs):
            cell = _fmt(k, col.metrics.get(k))
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
            console.print(f"  noise band for {escape(c.runs[i].label)}: ±{band:.1%} on step time "
                          f"(2 standard errors of the two medians)")
    for s in c.scaling:
        console.print(f"  scaling {s['from']} → {s['to']} processes ({escape(s['run'])}): efficiency "
                      f"[bold]{s['efficiency']:.0%}[/] — {s['regime']}; {s['formula']}")
    for g in c.gates:
        mark = "[bold red]FAIL[/]" if g.failed else "[green]pass[/]"
        noise = "" if g.beyond_noise is None else (" (beyond noise)" if g.beyond_noise else " (within noise)")
        console.print(f"  gate {escape(g.gate)} on {escape(g.run)}: {mark} — {escape(g.detail)}{noise}")
