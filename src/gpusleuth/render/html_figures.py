"""Plotly figure specifications (plain dicts) for the HTML report. Formatting only.

Every number comes from the Report — its JSON form (``report.to_dict()``) and its ``display`` data
(``analysis/timeseries.py``); this module only chooses chart types, colours, labels and layout.

Plotly draws trace names, axis categories and hover text as its own small HTML dialect (it understands
``<b>``, ``<br>`` and entities). Untrusted text — kernel names, op names, phase names, file names — goes
through :func:`plain` first, so it is shown literally (``&lt;script&gt;`` displays as ``<script>``) and
can never become markup, whatever plotly's own sanitizer would let through.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

from gpusleuth.render.labels import CATEGORY_LABELS
from gpusleuth.render.phase_labels import TOOL_PHASES

if TYPE_CHECKING:
    from gpusleuth.analysis.timeseries import DisplayData
    from gpusleuth.analysis.trace import StepPartition
    from gpusleuth.analysis.trace.gaps import GapHistogram
    from gpusleuth.analysis.trace.kernels import KernelBreakdown

#: one colour per partition category: device work cool/green, idle causes warm, unknown grey
CATEGORY_COLORS = {
    "compute": "#2ca02c", "comm": "#1f77b4",
    "memcpy_h2d_pinned": "#17becf", "memcpy_h2d_pageable": "#0e8a96", "memcpy_h2d": "#6dd3dc",
    "memcpy_d2h_pinned": "#9edae5", "memcpy_d2h_pageable": "#5fa8b1", "memcpy_d2h": "#b5e3e8",
    "memcpy_d2d": "#aec7e8", "memcpy_other": "#c5d6ea", "memset": "#98df8a",
    "idle_dependency": "#d62728", "idle_kernel_gap": "#ff9896", "idle_sync": "#e377c2",
    "idle_data_loader": "#ff7f0e", "idle_optimizer_cpu": "#bcbd22", "idle_launch": "#8c564b",
    "idle_host": "#9467bd", "idle_other": "#b0b0b0",
}
SHARE_COLORS = {"startup": "#b0b0b0", "data_wait": "#ff7f0e", "compute": "#2ca02c", "other": "#d9d9d9"}
SHARE_LABELS = {"startup": "start-up", "data_wait": "exposed data wait", "compute": "compute (rest of steps)",
                "other": "other (gaps, idle tail)", **TOOL_PHASES}
PHASE_SOLID = ["#1f77b4", "#9467bd", "#8c564b", "#17becf"]
PHASE_COLORS = ["rgba(31,119,180,0.13)", "rgba(148,103,189,0.15)", "rgba(140,86,75,0.15)", "rgba(23,190,207,0.15)"]
FAMILY_COLORS = {"communication": "#1f77b4", "tensor_core": "#2ca02c", "triton": "#9467bd",
                 "cuda_graph": "#17becf", "driver_api": "#bcbd22", "other": "#7f7f7f"}
FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12}


def plain(text: Any, limit: int | None = None) -> str:
    """Untrusted text for plotly: shortened if asked, then entity-escaped so it displays literally."""
    s = "" if text is None else str(text)
    if limit is not None and len(s) > limit:
        s = s[: limit - 1] + "…"
    return html.escape(s, quote=False)  # no tag can form without "<"; quotes need no escaping in labels


def base_layout(height: int, **kw: Any) -> dict[str, Any]:
    layout = {"height": height, "margin": {"l": 70, "r": 30, "t": 30, "b": 40}, "font": FONT,
              "paper_bgcolor": "white", "plot_bgcolor": "white",
              "legend": {"orientation": "h", "y": -0.15}}
    layout.update(kw)
    return layout


def share_label(key: str) -> str:
    """A wall-time share's legend name; keys other than the four fixed ones are phase names (untrusted)."""
    return SHARE_LABELS.get(key) or f"phase: {plain(key)}"


def wall_time_bar(share: dict[str, float], secs: dict[str, float]) -> dict[str, Any] | None:
    """Where the wall time went: one horizontal stacked bar (start-up, data wait, compute, phases…)."""
    share = share or {}
    secs = secs or {}
    if not share:
        return None
    data = []
    for i, (key, v) in enumerate(share.items()):
        if not v:
            continue
        name = share_label(key)
        data.append({"type": "bar", "orientation": "h", "y": ["wall time"], "x": [round(v * 100, 2)],
                     "name": name, "marker": {"color": SHARE_COLORS.get(key, PHASE_SOLID[i % 4])},
                     "text": [f"{v * 100:.0f}%"], "textposition": "inside",
                     "hovertemplate": f"{name}: {secs.get(key, 0):.2f} s (%{{x:.1f}}%)<extra></extra>"})
    return {"data": data, "layout": base_layout(
        150, barmode="stack", margin={"l": 80, "r": 20, "t": 10, "b": 30},
        xaxis={"range": [0, 100], "ticksuffix": "%", "fixedrange": True}, yaxis={"fixedrange": True},
        legend={"orientation": "h", "y": -0.5})}


def timeline(display: DisplayData | None) -> dict[str, Any] | None:
    """One shared time axis: a stacked subplot per panel, phases shaded across all, throttling marked."""
    if display is None or not display.panels:
        return None
    panels = list(display.panels)
    weights = [1.4 if p.key == "cores" else 1.0 for p in panels]
    gap = 0.045
    usable = 1.0 - gap * (len(panels) - 1)
    unit = usable / sum(weights)
    domains, top = {}, 1.0
    for p, w in zip(panels, weights):
        domains[p.key] = (max(top - w * unit, 0.0), top)
        top -= w * unit + gap
    axis_of = {p.key: ("y" if i == 0 else f"y{i + 1}") for i, p in enumerate(panels)}
    layout = base_layout(
        150 * len(panels) + 120, hovermode="x unified", margin={"l": 70, "r": 90, "t": 30, "b": 50},
        legend={"orientation": "v", "x": 1.01, "y": 1, "font": {"size": 10}},
        xaxis={"anchor": axis_of[panels[-1].key], "title": {"text": "seconds since the run started"},
               "showspikes": True, "spikemode": "across", "spikethickness": 1, "spikecolor": "#888",
               "showgrid": True, "gridcolor": "#eee"},
    )
    annotations, shapes = [], []
    for p in panels:
        name = axis_of[p.key]
        lo, hi = domains[p.key]
        layout["yaxis" if name == "y" else "yaxis" + name[1:]] = {
            "domain": [round(lo, 4), round(hi, 4)], "title": {"text": plain(p.unit), "font": {"size": 10}},
            "gridcolor": "#eee", "zeroline": False, "rangemode": "tozero", "anchor": "x"}
        annotations.append({"text": f"<b>{plain(p.title)}</b>", "xref": "paper", "yref": "paper", "x": 0,
                            "y": hi, "xanchor": "left", "yanchor": "bottom", "showarrow": False,
                            "font": {"size": 11}})
    data: list[dict[str, Any]] = []
    for s in display.series:
        if s.panel not in axis_of:
            continue
        trace = {"type": "scattergl" if len(s.t) > 1000 else "scatter", "mode": s.mode, "x": s.t, "y": s.y,
                 "name": plain(s.name), "xaxis": "x", "yaxis": axis_of[s.panel], "line": {"width": 1.2},
                 "legendgroup": s.panel, "hovertemplate": f"{plain(s.name)}: %{{y:.4~g}}<extra></extra>"}
        if "markers" in s.mode:
            trace["marker"] = {"size": 3}
        data.append(trace)
    for h in display.heatmaps:
        lo, hi = domains[h.panel]
        data.append({"type": "heatmap", "x": h.t, "y": [plain(r) for r in h.rows], "z": h.z, "xaxis": "x",
                     "yaxis": axis_of[h.panel], "zmin": 0, "zmax": 100,
                     "colorscale": [[0, "#ffffff"], [0.3, "#fee391"], [0.7, "#fb6a4a"], [1, "#a50f15"]],
                     "name": plain(h.name), "showscale": True,
                     "colorbar": {"len": round(hi - lo, 3), "y": round((lo + hi) / 2, 3), "thickness": 8,
                                  "x": 1.0, "ticksuffix": "%", "tickfont": {"size": 9}},
                     "hovertemplate": "%{y}: %{z:.0f}% at %{x:.1f} s<extra></extra>"})
    phase_names: dict[str, int] = {}
    for b in display.bands:
        if b.kind == "phase":
            color = PHASE_COLORS[phase_names.setdefault(b.label, len(phase_names)) % len(PHASE_COLORS)]
            shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": b.start_s, "x1": b.end_s,
                           "y0": 0, "y1": 1, "fillcolor": color, "line": {"width": 0}, "layer": "below"})
            annotations.append({"text": plain(b.label, 24), "xref": "x", "yref": "paper", "x": b.start_s,
                                "y": 1.0, "xanchor": "left", "yanchor": "bottom", "showarrow": False,
                                "font": {"size": 10, "color": "#1f4e79"}})
        elif b.kind == "throttle" and "gpu_clocks" in axis_of:
            shapes.append({"type": "rect", "xref": "x", "yref": f"{axis_of['gpu_clocks']} domain",
                           "x0": b.start_s, "x1": b.end_s, "y0": 0, "y1": 1, "fillcolor": "rgba(214,39,40,0.25)",
                           "line": {"width": 0}, "layer": "below", "name": plain(b.label)})
    layout["annotations"] = annotations
    layout["shapes"] = shapes
    return {"data": data, "layout": layout}


def step_partition(steps: list[StepPartition], trace_partition: dict[str, float],
                   labels: dict[str, str] = CATEGORY_LABELS) -> dict[str, Any] | None:
    """Exposed time per step, stacked by category (each bar sums to the step time)."""
    if steps:
        xs = [f"#{s.step}" for s in steps]
        parts = [s.partition for s in steps]
        title_x = "profiler step"
    elif trace_partition:
        xs, parts, title_x = ["whole trace"], [trace_partition], "(no ProfilerStep annotations)"
    else:
        return None
    data = []
    for cat, label in labels.items():
        ys = [round(p.get(cat, 0.0) * 1e3, 4) for p in parts]
        if not any(ys):
            continue
        data.append({"type": "bar", "x": xs, "y": ys, "name": plain(label),
                     "marker": {"color": CATEGORY_COLORS.get(cat, "#999")},
                     "hovertemplate": f"{plain(label)}: %{{y:.2f}} ms<extra>%{{x}}</extra>"})
    return {"data": data, "layout": base_layout(
        380, barmode="stack", xaxis={"title": {"text": title_x}, "type": "category"},
        yaxis={"title": {"text": "ms"}, "gridcolor": "#eee"},
        legend={"orientation": "v", "x": 1.02, "y": 1, "font": {"size": 10}},
        margin={"l": 60, "r": 20, "t": 20, "b": 50})}


def _fmt_us(v: float) -> str:
    if v >= 1e6:
        return f"{v / 1e6:g} s"
    if v >= 1e3:
        return f"{v / 1e3:g} ms"
    return f"{v:g} µs"


def _span(a: float, b: float) -> str:
    """'1–3 µs', '300 µs–1 ms': the unit once when both ends share it."""
    x, y = _fmt_us(a), _fmt_us(b)
    ux, uy = x.split(" ")[1], y.split(" ")[1]
    return f"{x.split(' ')[0]}–{y}" if ux == uy else f"{x}–{y}"


def gap_histogram(h: GapHistogram | None) -> dict[str, Any] | None:
    """Device idle gaps by size (log bins), stacked by each gap's dominant cause."""
    if h is None:
        return None
    e = h.edges_us
    xs = [_span(e[i], e[i + 1]) for i in range(len(e) - 1)]
    xs[0] = "< " + _fmt_us(e[1])
    xs[-1] = "≥ " + _fmt_us(e[-2])
    data, ms_y, count_y = [], [], []
    for cat, label in CATEGORY_LABELS.items():
        if cat not in h.counts:
            continue
        secs = [round((v or 0.0) * 1e3, 4) for v in h.seconds[cat]]
        ms_y.append(secs)
        count_y.append(h.counts[cat])
        data.append({"type": "bar", "x": xs, "y": secs, "name": plain(label),
                     "customdata": [[c, m] for c, m in zip(h.counts[cat], secs)],
                     "marker": {"color": CATEGORY_COLORS.get(cat, "#999")},
                     "hovertemplate": f"{plain(label)}: %{{customdata[0]}} gaps, %{{customdata[1]:.2f}} ms"
                                      "<extra>%{x}</extra>"})
    # idle time by default (where the time went); the count view shows how many holes there are
    menu = {"type": "buttons", "direction": "right", "x": 0, "y": 1.12, "xanchor": "left", "showactive": True,
            "buttons": [{"label": "idle time", "method": "update",
                         "args": [{"y": ms_y}, {"yaxis.title.text": "idle ms"}]},
                        {"label": "number of gaps", "method": "update",
                         "args": [{"y": count_y}, {"yaxis.title.text": "gaps"}]}]}
    return {"data": data, "layout": base_layout(
        360, barmode="stack", updatemenus=[menu],
        xaxis={"title": {"text": "gap length"}, "type": "category", "automargin": True},
        yaxis={"title": {"text": "idle ms"}, "gridcolor": "#eee"},
        legend={"orientation": "v", "x": 1.02, "y": 1, "font": {"size": 10}},
        margin={"l": 60, "r": 20, "t": 40, "b": 50})}


def kernel_bars(kernels: KernelBreakdown) -> dict[str, Any] | None:
    """Top kernels by total device time, coloured by family; full names in the hover and the table."""
    top = kernels.top
    if not top:
        return None
    rows = list(reversed(top))  # largest at the top of a horizontal bar chart
    labels = [f"{i}. {plain(r.name, 70)}" for i, r in zip(range(len(rows), 0, -1), rows)]
    data = []
    spare = iter(["#ff7f0e", "#8c564b", "#e377c2", "#bcbd22", "#9edae5", "#c49c94"] * 4)
    for fam in dict.fromkeys(r.family or "other" for r in rows):
        sel = [i for i, r in enumerate(rows) if (r.family or "other") == fam]
        data.append({"type": "bar", "orientation": "h", "name": plain(fam),
                     "y": [labels[i] for i in sel], "x": [round(rows[i].total_s * 1e3, 4) for i in sel],
                     "customdata": [[plain(rows[i].name, 400), rows[i].count, round(rows[i].share * 100, 2)]
                                    for i in sel],
                     "marker": {"color": FAMILY_COLORS.get(fam) or next(spare)},
                     "hovertemplate": "%{customdata[0]}<br>%{x:.2f} ms total · %{customdata[1]} launches · "
                                      "%{customdata[2]}% of kernel time<extra></extra>"})
    return {"data": data, "layout": base_layout(
        28 * len(rows) + 90, barmode="stack",
        yaxis={"categoryorder": "array", "categoryarray": labels, "automargin": True, "tickfont": {"size": 10}},
        xaxis={"title": {"text": "total ms"}, "gridcolor": "#eee"},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"}, margin={"l": 20, "r": 20, "t": 30, "b": 40})}
