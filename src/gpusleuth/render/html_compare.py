"""The HTML page of ``gpusleuth compare``: charts of what changed between runs. Formatting only.

Every number comes from the ComparisonReport (report/comparison.py): metrics, deltas and noise bands
from analysis/compare.py, per-run step series, step-time spreads, wall-time splits and findings. The page
shares its shell, its escaping and its safety model with the single-run report (render/html.py): text
through ``html.escape``, plotly labels through ``html_figures.plain``, figure data in one JSON block.
"""

from __future__ import annotations

from typing import Any

from gpusleuth.analysis.compare import METRICS, Scaling
from gpusleuth.report.comparison import SCHEMA, ComparisonReport
from gpusleuth.render import html_figures as F
from gpusleuth.render.html import document, e, table, tile
from gpusleuth.render.html_page import Page
from gpusleuth.render.units import dollars, metric_text

RUN_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]
BETTER, WORSE, NOISE = "#2ca02c", "#d62728", "#b0b0b0"
SEVERITY_MARK = {"high": "●", "moderate": "◐", "none": "○"}


def _names(cr: ComparisonReport) -> list[str]:
    """Run names for chart categories: labels, numbered when two runs share one (categories must differ)."""
    labels = [v.label or "run" for v in cr.views]
    if len(set(labels)) < len(labels):
        labels = [f"{i + 1}. {lab}" for i, lab in enumerate(labels)]
    return [F.plain(lab, 48) for lab in labels]


def _color(i: int) -> str:
    return RUN_COLORS[i % len(RUN_COLORS)]


# --- figures -------------------------------------------------------------------------------------------

def deltas_figure(cr: ComparisonReport, names: list[str]) -> dict[str, Any] | None:
    """Change of each metric against the baseline, green when better, red when worse, grey within noise."""
    c = cr.comparison
    keys = [k for k in METRICS if any(d.get(k) is not None for d in c.deltas[1:])]
    if not keys:
        return None
    rows = [METRICS[k][0] for k in reversed(keys)]  # first metric on top
    data = []
    for i in range(1, len(c.runs)):
        xs, colors, notes = [], [], []
        for k in reversed(keys):
            d = c.deltas[i].get(k)
            xs.append(None if d is None else round(d * 100, 3))
            noise = c.beyond_noise[i].get(k)
            better = d is not None and (d > 0) == METRICS[k][1]
            colors.append(NOISE if noise is False or not d else (BETTER if better else WORSE))
            was, now = metric_text(k, c.runs[0].metrics.get(k)), metric_text(k, c.runs[i].metrics.get(k))
            verdict = {True: "beyond the noise", False: "within the noise", None: ""}[noise]
            notes.append(f"{was} → {now}" + (f" ({verdict})" if verdict else ""))
        data.append({"type": "bar", "orientation": "h", "y": rows, "x": xs, "name": names[i],
                     "marker": {"color": colors, "line": {"color": _color(i), "width": 2}},
                     "customdata": notes,
                     "hovertemplate": f"{names[i]}: %{{x:+.1f}}%<br>%{{customdata}}<extra>%{{y}}</extra>"})
    shapes = []
    bands = [b for b in c.noise_band[1:] if b is not None]
    if bands:
        b = max(bands) * 100
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": -b, "x1": b, "y0": 0, "y1": 1,
                       "fillcolor": "rgba(0,0,0,0.07)", "line": {"width": 0}, "layer": "below"})
    return {"data": data, "layout": F.base_layout(
        34 * len(keys) * max(1, len(c.runs) - 1) + 110, barmode="group", shapes=shapes,
        xaxis={"title": {"text": "% change against the baseline (grey band: step-time noise, 2 SE)"},
               "ticksuffix": "%", "zeroline": True, "zerolinecolor": "#444", "gridcolor": "#eee"},
        yaxis={"automargin": True}, showlegend=len(c.runs) > 2,
        margin={"l": 20, "r": 20, "t": 20, "b": 50})}


def throughput_figure(cr: ComparisonReport, names: list[str]) -> dict[str, Any] | None:
    """Steady throughput per run with ±2 standard errors (from the spread of steady step times)."""
    c = cr.comparison
    key = "throughput" if any(col.metrics.get("throughput") for col in c.runs) else None
    if key is None:
        return None
    ys, errs = [], []
    for col in c.runs:
        v = col.metrics.get(key)
        ys.append(v)
        errs.append(2 * col.step_se_rel * v if v is not None and col.step_se_rel is not None else 0)
    return {"data": [{"type": "bar", "x": names, "y": ys, "marker": {"color": [_color(i) for i in range(len(ys))]},
                      "error_y": {"type": "data", "array": errs, "visible": True, "color": "#333"},
                      "hovertemplate": "%{x}: %{y:,.1f} samples/s ± %{error_y.array:,.1f}<extra></extra>"}],
            "layout": F.base_layout(300, showlegend=False, yaxis={"title": {"text": "samples/s (steady)"},
                                                                    "gridcolor": "#eee", "rangemode": "tozero"},
                                     xaxis={"type": "category"}, margin={"l": 70, "r": 20, "t": 20, "b": 60})}


def spread_figure(cr: ComparisonReport, names: list[str]) -> dict[str, Any] | None:
    """Steady step times per run as boxes: whiskers p5–p95, box p25–p75, line at the median."""
    data = []
    for i, v in enumerate(cr.views):
        s = v.spread
        if s is None:
            continue
        data.append({"type": "box", "name": names[i], "x": [names[i]], "q1": [s.p25], "median": [s.p50],
                     "q3": [s.p75], "lowerfence": [s.p5], "upperfence": [s.p95], "mean": [s.mean],
                     "boxmean": True, "marker": {"color": _color(i)}, "line": {"color": _color(i)},
                     "hoverinfo": "y"})
    if not data:
        return None
    return {"data": data, "layout": F.base_layout(
        320, showlegend=False, xaxis={"type": "category"},
        yaxis={"title": {"text": "steady step time, ms"},
               "gridcolor": "#eee", "rangemode": "tozero"},
        margin={"l": 70, "r": 20, "t": 20, "b": 60})}


def steps_figure(cr: ComparisonReport, names: list[str]) -> dict[str, Any] | None:
    """Step time over the run, one line per run; dotted lines mark where each run's warm-up ends."""
    data, shapes = [], []
    for i, v in enumerate(cr.views):
        s = v.steps
        if s is None:
            continue
        data.append({"type": "scattergl" if len(s.x) > 1000 else "scatter", "mode": "lines", "x": s.x, "y": s.y,
                     "name": names[i], "line": {"width": 1.2, "color": _color(i)},
                     "hovertemplate": f"{names[i]}: step %{{x}} %{{y:.2f}} ms<extra></extra>"})
        if s.warmup:
            shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": s.warmup - 0.5,
                           "x1": s.warmup - 0.5, "y0": 0, "y1": 1,
                           "line": {"color": _color(i), "width": 1, "dash": "dot"}})
    if not data:
        return None
    return {"data": data, "layout": F.base_layout(
        320, shapes=shapes, hovermode="x", xaxis={"title": {"text": "step"}, "gridcolor": "#eee"},
        yaxis={"title": {"text": "step time, ms"}, "gridcolor": "#eee", "rangemode": "tozero"},
        legend={"orientation": "h", "y": -0.25})}


def wall_split_figure(cr: ComparisonReport, names: list[str]) -> dict[str, Any] | None:
    """Where each run's wall time went, one stacked bar per run (same colours as the single-run page)."""
    keys: list[str] = []
    for v in cr.views:
        keys += [k for k, x in v.time_share.items() if x and k not in keys]
    if not keys:
        return None
    rows = list(reversed(names))  # baseline on top
    views = list(reversed(cr.views))
    data = []
    phase_i = 0
    for key in keys:
        color = F.SHARE_COLORS.get(key)
        if color is None:
            color, phase_i = F.PHASE_SOLID[phase_i % len(F.PHASE_SOLID)], phase_i + 1
        name = F.share_label(key)
        data.append({"type": "bar", "orientation": "h", "y": rows, "name": name,
                     "x": [round(v.time_share.get(key, 0.0) * 100, 2) for v in views],
                     "customdata": [round(v.time_s.get(key, 0.0), 3) for v in views],
                     "marker": {"color": color}, "textposition": "inside",
                     "text": [f"{v.time_share.get(key, 0.0) * 100:.0f}%" if v.time_share.get(key, 0) >= 0.04 else ""
                              for v in views],
                     "hovertemplate": f"{name}: %{{customdata:.2f}} s (%{{x:.1f}}%)<extra>%{{y}}</extra>"})
    return {"data": data, "layout": F.base_layout(
        46 * len(rows) + 110, barmode="stack", xaxis={"range": [0, 100], "ticksuffix": "%"},
        yaxis={"automargin": True, "type": "category"}, legend={"orientation": "h", "y": -0.3},
        margin={"l": 20, "r": 20, "t": 10, "b": 40})}


def findings_figure(cr: ComparisonReport, names: list[str]) -> dict[str, Any] | None:
    """Each cause's estimated wall-time gain per run: a fix that worked makes its bar vanish."""
    causes: list[str] = []
    for v in cr.views:
        causes += [f.cause for f in v.findings if f.severity != "none" and f.wall_share and f.cause not in causes]
    if not causes:
        return None
    rows = list(reversed(causes))
    data = []
    for i, v in enumerate(cr.views):
        by = {f.cause: f for f in v.findings if f.severity != "none"}
        data.append({"type": "bar", "orientation": "h", "y": rows, "name": names[i],
                     "x": [round((by[c].wall_share or 0) * 100, 2) if c in by else 0 for c in rows],
                     "customdata": [F.plain(f"{SEVERITY_MARK[by[c].severity]} {by[c].severity}: {by[c].title}", 120)
                                    if c in by else "not found in this run" for c in rows],
                     "marker": {"color": _color(i)},
                     "hovertemplate": f"{names[i]}: %{{x:.1f}}% of wall time<br>%{{customdata}}<extra>%{{y}}</extra>"})
    return {"data": data, "layout": F.base_layout(
        30 * len(causes) * len(cr.views) + 110, barmode="group",
        xaxis={"title": {"text": "estimated gain, % of wall time"}, "ticksuffix": "%", "gridcolor": "#eee",
               "rangemode": "tozero"},
        yaxis={"automargin": True, "type": "category"}, legend={"orientation": "h", "y": -0.2},
        margin={"l": 20, "r": 20, "t": 10, "b": 50})}


def _per_1k(s: Scaling, i: int) -> str:
    x = s["per_1k"][i]
    return dollars(x) if s["per_1k_unit"].startswith("$") else f"{x:,.3g} process-s"


def scaling_figure(cr: ComparisonReport) -> dict[str, Any] | None:
    sc = cr.comparison.scaling
    if not sc:
        return None
    xs = [F.plain(f"{s['from']} → {s['to']}: {s['run']}", 60) for s in sc]
    return {"data": [{"type": "bar", "x": xs, "y": [round(s["efficiency"] * 100, 2) for s in sc],
                      "marker": {"color": "#1f77b4"}, "customdata": [F.plain(s["regime"]) for s in sc],
                      "hovertemplate": "%{x}: %{y:.0f}% — %{customdata}<extra></extra>"}],
            "layout": F.base_layout(280, showlegend=False, xaxis={"type": "category"},
                                     yaxis={"title": {"text": "scaling efficiency"}, "ticksuffix": "%",
                                            "range": [0, 110], "gridcolor": "#eee"},
                                     shapes=[{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 100,
                                              "y1": 100, "line": {"dash": "dash", "color": "#888"}}])}


# --- page ----------------------------------------------------------------------------------------------

def _verdict(pg: Page, cr: ComparisonReport) -> None:
    c = cr.comparison
    tiles = []
    for i in range(1, len(c.runs)):
        key = "throughput" if c.deltas[i].get("throughput") is not None else "step_time"
        d = c.deltas[i].get(key)
        if d is None:
            continue
        noise = c.beyond_noise[i].get(key)
        word = "noise unknown" if noise is None else "beyond the noise" if noise else "within the noise"
        band = c.noise_band[i]
        tiles.append(tile(f"{e(METRICS[key][0])}: {e(c.runs[i].label)}", f"{d:+.1%}",
                          f"{word}" + (f" (band ±{band:.1%})" if band is not None else "")))
    for g in c.gates:
        tiles.append(tile(f"gate <code>{e(g.gate)}</code> on {e(g.run)}",
                          "<span class=fail>FAIL</span>" if g.failed else "<span class=pass>pass</span>",
                          e(g.detail)))
    if tiles:
        pg.add('<section class=headline><h2>Verdict</h2><div class=tiles>' + "".join(tiles) + "</div></section>")


def _metrics_table(cr: ComparisonReport) -> str:
    c = cr.comparison
    head = ["metric"] + [e(col.label) + (" <span class=dim>(baseline)</span>" if i == 0 else "")
                         for i, col in enumerate(c.runs)]
    rows = []
    for k, (label, higher_better) in METRICS.items():
        if all(col.metrics.get(k) is None for col in c.runs):
            continue
        cells = [e(label)]
        for i, col in enumerate(c.runs):
            cell = e(metric_text(k, col.metrics.get(k)))
            d = c.deltas[i].get(k)
            if i and d is not None:
                noise = c.beyond_noise[i].get(k)
                cls = "dim" if noise is False else ("better" if (d > 0) == higher_better else "worse")
                cell += f' <span class={cls}>({d:+.1%}{", noise" if noise is False else ""})</span>'
            cells.append(cell)
        rows.append(cells)
    rows.append(["processes / GPUs"] + [str(col.processes) for col in c.runs])
    return table(head, rows, "num")


def _runs_list(cr: ComparisonReport) -> str:
    items = []
    for i, v in enumerate(cr.views):
        what = f"<code>{e(' '.join(map(str, v.command)))}</code>" if v.command else ""
        where = f" <span class=dim>{e(str(v.path))}</span>" if v.path else ""
        items.append(f"<li><b>{e(v.label)}</b>{' (baseline)' if i == 0 else ''} {what}{where}</li>")
    return "<ul>" + "".join(items) + "</ul>"


def _findings_table(cr: ComparisonReport) -> str:
    causes: list[str] = []
    for v in cr.views:
        causes += [f.cause for f in v.findings if f.cause not in causes]
    rows = []
    for cause in causes:
        cells = [f"<code>{e(cause)}</code>"]
        for v in cr.views:
            f = next((f for f in v.findings if f.cause == cause), None)
            if f is None:
                cells.append("<span class=dim>–</span>")
                continue
            gain = f" · {f.wall_share:.0%} of wall" if f.wall_share else ""
            cells.append(f'<span class="sev-{e(f.severity)}">{e(f.severity)}</span>{gain}<br>'
                         f'<span class=dim>{e(f.title)}</span>')
        rows.append(cells)
    return table(["cause"] + [e(v.label) for v in cr.views], rows, "findings")


def render_compare_html(cr: ComparisonReport) -> str:
    names = _names(cr)
    pg = Page()
    title = " vs ".join(v.label or "run" for v in cr.views)
    pg.add(f"<header><h1>gpusleuth compare <span class=dim>— {e(title)}</span></h1>{_runs_list(cr)}</header>")
    _verdict(pg, cr)
    pg.add("<section><h2>What changed against the baseline</h2><p class=dim>Each metric's change; green is "
           "better, red is worse, grey is within the step-time noise (2 standard errors of the two medians). "
           "Exact numbers are in the table below.</p>")
    pg.figure(deltas_figure(cr, names))
    pg.add(_metrics_table(cr))
    bands = [f"{e(cr.comparison.runs[i].label)}: ±{b:.1%}" for i, b in enumerate(cr.comparison.noise_band)
             if i and b is not None]
    if bands:
        pg.add("<p class=dim>Noise band on step time: " + "; ".join(bands) + "</p>")
    pg.add("</section>")
    pg.add("<section><h2>Throughput and step time</h2>")
    pg.figure(throughput_figure(cr, names), "fig small")
    pg.add("<h3>Spread of steady step times</h3><p class=dim>Whiskers p5–p95, box p25–p75, solid line the "
           "median, dashed the mean; warm-up steps excluded.</p>")
    pg.figure(spread_figure(cr, names))
    pg.add("<h3>Step time over the run</h3>")
    pg.figure(steps_figure(cr, names))
    pg.add("</section>")
    fig = wall_split_figure(cr, names)
    if fig is not None:
        pg.add("<section><h2>Where the wall time went</h2>")
        pg.figure(fig, "fig small")
        pg.add("</section>")
    if any(v.findings for v in cr.views):
        pg.add("<section><h2>Findings per run</h2><p class=dim>Estimated gain of each cause in each run: a fix "
               "that worked makes its bar vanish, and shows what became the bottleneck next.</p>")
        pg.figure(findings_figure(cr, names))
        pg.add(_findings_table(cr) + "</section>")
    fig = scaling_figure(cr)
    if fig is not None:
        pg.add("<section><h2>Scaling</h2><p class=dim>throughput(N) ÷ (N/N0 · throughput(N0)); 100% is "
               "linear.</p>")
        pg.figure(fig, "fig small")
        verdicts = [s for s in cr.comparison.scaling if "verdict" in s]
        if verdicts:
            pg.add(table(["sizes", "run", "speedup", "per 1k samples (before → after)", "verdict"],
                         [[f"{s['from']} → {s['to']}", e(s["run"]), f"{s['speedup']:.2f}×",
                           f"{_per_1k(s, 0)} → {_per_1k(s, 1)}", e(s["verdict"])] for s in verdicts]))
        pg.add("</section>")
    return document(f"gpusleuth compare — {title}", pg, f"schema {SCHEMA}")
