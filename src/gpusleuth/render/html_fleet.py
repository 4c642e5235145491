"""The HTML page of ``gpusleuth fleet``: what the waste costs, by cause, and which runs waste it. Formatting only.

Shares the single-run page's shell and safety model (render/html.py): every label, path and finding title
comes from users' commands and goes through ``html.escape`` (tables) or ``html_figures.plain`` (plotly).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpusleuth.render import html_figures as F
from gpusleuth.render.fleet_console import _pct, _usd, finding_text, when
from gpusleuth.render.html import document, e, table, tile
from gpusleuth.render.html_page import Page

if TYPE_CHECKING:
    from gpusleuth.report.fleet import Fleet

TOP_RUNS = 30  # bars in the per-run chart; the table has every row


def _cause_figure(fleet: Fleet) -> dict[str, Any] | None:
    causes = list(fleet.lost_by_cause)
    if not causes:
        return None
    return {"data": [{"type": "bar", "orientation": "h", "y": [F.plain(c, 40) for c in reversed(causes)],
                      "x": [round(fleet.lost_by_cause[c], 4) for c in reversed(causes)],
                      "hovertemplate": "%{y}: $%{x:,.2f}<extra></extra>", "marker": {"color": "#d62728"}}],
            "layout": F.base_layout(60 + 28 * len(causes), xaxis={"title": {"text": "USD lost"}})}


def _runs_figure(fleet: Fleet) -> dict[str, Any] | None:
    rows = [r for r in fleet.rows if r["lost_by_cause"]][:TOP_RUNS]
    if not rows:
        return None
    names = [F.plain(f"{i + 1}. {r['label']}", 48) for i, r in enumerate(rows)]
    causes = list(fleet.lost_by_cause)
    data = [{"type": "bar", "orientation": "h", "name": F.plain(c, 40), "y": names[::-1],
             "x": [round(r["lost_by_cause"].get(c, 0.0), 4) for r in rows[::-1]],
             "hovertemplate": f"{F.plain(c, 40)}: $%{{x:,.2f}}<extra>%{{y}}</extra>"} for c in causes]
    layout = F.base_layout(80 + 22 * len(rows), barmode="stack", xaxis={"title": {"text": "USD lost"}})
    layout["margin"] = {**layout["margin"], "l": 170}  # run labels are long
    return {"data": data, "layout": layout}


def render_fleet_html(fleet: Fleet) -> str:
    pg = Page()
    tot = fleet.totals
    pg.add(f"<header><h1>gpusleuth fleet <span class=dim>— {fleet.runs:,} run(s)</span></h1></header>")
    pg.add("<section><div class=tiles>"
           + tile("GPU-hours", e(f"{tot.get('gpu_hours') or 0:,.1f}"))
           + tile("cost", e(_usd(tot.get("cost_usd"))))
           + tile("lost to badput", e(_usd(tot.get("lost_usd"))))
           + "</div></section>")
    pg.add("<section><h2>Cost of waste by cause</h2><p class=dim>Badput seconds of every run × that run's price "
           "per second of wall time (all its GPUs).</p>")
    if fleet.lost_by_cause:
        pg.figure(_cause_figure(fleet), "fig small")
        pg.add(f"<h3>The runs that waste most (top {TOP_RUNS})</h3>")
        pg.figure(_runs_figure(fleet))
    else:
        pg.add("<p>No prices: give <code>--price-per-gpu-hour</code> to see dollars lost by cause.</p>")
    pg.add("</section><section><h2>Runs</h2>")
    head = ["run", "started (UTC)", "GPUs", "GPU-h", "goodput", "MFU", "$ run", "$ lost", "lost mostly to",
            "top finding"]
    rows = [[e(str(r["label"])), e(when(r["start_ns"])), e(str(r["gpus"] or 0)),
             e("–" if r["gpu_hours"] is None else f"{r['gpu_hours']:,.2f}"), e(_pct(r["goodput"])), e(_pct(r["mfu"])),
             e(_usd(r["cost_usd"])), e(_usd(r["lost_usd"])), e(str(r["top_lost_cause"] or "–")),
             e(finding_text(r) or "–")] for r in fleet.rows]
    pg.add(table(head, rows))
    if fleet.skipped:
        pg.add("<h3>Left out</h3><ul>" + "".join(f"<li>{e(s)}</li>" for s in fleet.skipped) + "</ul>")
    pg.add("</section>")
    return document("gpusleuth fleet", pg, "fleet schema gpusleuth.fleet/1")
