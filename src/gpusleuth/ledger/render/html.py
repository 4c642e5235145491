"""The HTML page of ``fleet --prometheus``: GPU-hours by namespace and class, top offenders, idle spans.

Formatting only. Shares the single-run page's shell and safety model (render/html.py): every namespace,
pod and host name comes from the cluster and goes through ``html.escape`` (tables) or
``html_figures.plain`` (plotly).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpusleuth.render import html_figures as F
from gpusleuth.render.fleet_console import _usd
from gpusleuth.render.html import document, e, table, tile
from gpusleuth.render.html_page import Page
from gpusleuth.ledger.render.console import sizing_text

if TYPE_CHECKING:
    from gpusleuth.ledger.report import LedgerReport

CLASS_COLORS = {"productive": "#2ca02c", "low_activity": "#ff7f0e", "allocated_idle": "#d62728",
                "unallocated": "#7f7f7f", "no_data": "#c7c7c7"}
TOP = 40


def _namespace_figure(d: dict[str, Any]) -> dict[str, Any] | None:
    ns = [n for n in d["namespaces"]][:TOP]
    if not ns:
        return None
    names = [F.plain(n["namespace"] or "(none)", 40) for n in ns][::-1]
    data = [{"type": "bar", "orientation": "h", "name": c, "y": names,
             "x": [n["hours"][c] or 0 for n in ns][::-1], "marker": {"color": col},
             "hovertemplate": f"{c}: %{{x:,.1f}} GPU-h<extra>%{{y}}</extra>"}
            for c, col in CLASS_COLORS.items() if c != "unallocated"]
    return {"data": data, "layout": F.base_layout(80 + 24 * len(ns), barmode="stack",
                                                  xaxis={"title": {"text": "GPU-hours"}})}


def render_ledger_html(report: LedgerReport) -> str:
    d = report.to_dict()
    tot, usd = d["totals"]["hours"], d["totals"]["usd"]
    pg = Page()
    pg.add(f"<header><h1>gpusleuth fleet <span class=dim>— {d['gpus']:,} GPU(s), {e(d['start'])} → "
           f"{e(d['end'])}</span></h1><p class=dim>{e(d['server'])} · {e(d['price_source'])}</p></header>")
    pg.add("<section><div class=tiles>"
           + tile("GPU-hours", e(f"{sum(v or 0 for v in tot.values()):,.1f}"))
           + tile("allocated but idle", e(f"{tot['allocated_idle'] or 0:,.1f} h"), e(_usd(usd["allocated_idle"])))
           + tile("low activity", e(f"{tot['low_activity'] or 0:,.1f} h"), e(_usd(usd["low_activity"])))
           + tile("unallocated", e(f"{tot['unallocated'] or 0:,.1f} h"), e(_usd(usd["unallocated"])))
           + "</div></section>")
    pg.add("<section><h2>GPU-hours by namespace</h2>")
    pg.figure(_namespace_figure(d))
    pg.add("</section><section><h2>Top offenders</h2>")
    head = ["workload", "GPUs", "alloc GPU-h", "idle h", "low h", "$ wasted", "reason", "p99 mem GiB",
            "right-size", "risk"]
    rows = [[e(r["workload"]), e(f"{r['gpus']}× {r['model']}"), e(f"{r['allocated_h']:,.2f}"),
             e(f"{r['allocated_idle_h']:,.2f}"), e(f"{r['low_activity_h']:,.2f}"), e(_usd(r["wasted_usd"])),
             e(f"{r['reason']}: {r['reason_text']}"), e("–" if r["mem_p99_gib"] is None else f"{r['mem_p99_gib']:.1f}"),
             e(sizing_text(r)), e(r["sizing_risk"] or "–")] for r in d["workloads"]]
    pg.add(table(head, rows))
    if d["models"]:
        pg.add("<h3>By served model: energy and dollars per output token</h3>")
        pg.add(table(["model", "namespaces", "pods", "GPU-h", "kWh", "idle kWh", "output tokens", "input tokens",
                      "J / output token", "$ / M output tokens", "J / input token (prefill)"],
                     [[e(m["model"]), e(", ".join(m["namespaces"])), e(str(m["pods"])), e(f"{m['gpu_h']:,.2f}"),
                       e(f"{m['energy_kwh']:,.2f}"), e(f"{m['idle_energy_kwh']:,.2f}"), e(f"{m['tokens_out']:,.0f}"),
                       e(f"{m['tokens_in']:,.0f}"),
                       e("–" if m["j_per_token_out"] is None else f"{m['j_per_token_out']:,.3f}"),
                       e(_usd(m["usd_per_mtok_out"])),
                       e(f"{m['j_per_token_in']:,.4g}" if m["j_per_token_in"] is not None else "–")]
                      for m in d["models"]]))
        for m in d["models"]:
            if m["j_per_token_in"] is None and m["prefill_note"]:
                pg.add(f"<p class=dim>{e(m['model'])}, per input token: {e(m['prefill_note'])}</p>")
    spans = [(r["workload"], s) for r in d["workloads"] for s in r["idle_spans"]]
    spans.sort(key=lambda x: -x[1]["hours"])
    if spans:
        pg.add(f"<h3>Idle spans (longest {min(len(spans), 100)})</h3>")
        pg.add(table(["workload", "host", "GPU", "from", "to", "hours"],
                     [[e(w), e(s["host"]), e(s["uuid"]), e(s["start"]), e(s["end"]), e(f"{s['hours']:.2f}")]
                      for w, s in spans[:100]]))
    if d["found"]:
        pg.add("<h3>Found</h3><ul>" + "".join(f"<li>{e(n)}</li>" for n in d["found"]) + "</ul>")
    if d["notes"]:
        pg.add("<h3>Notes</h3><ul>" + "".join(f"<li>{e(n)}</li>" for n in d["notes"]) + "</ul>")
    pg.add("</section>")
    return document("gpusleuth fleet", pg, "fleet schema gpusleuth.ledger/1")
