"""The serving section of the HTML report: the level table, the outcomes at the knee, and two charts —
latency against throughput (p50 and p95 vs req/s, one point per level, the knee ringed, the budget as a
line) and requests/s per level. Formatting only: the numbers are ``report.serving`` (serving/report.py).
``request_stages_section``: where a recorded server's request time went (queue / pre / infer / post), per
load level and for the requests that ran alone, from ``report.requests`` (serving/analysis/requests.py); for a batching
server, the batches per level and requests per forward over time (``BatchStats.over_time``,
serving/analysis/batch_stats.py).

The URL and level labels came from a command line: text goes through ``html.escape``, chart labels through
``html_figures.plain``."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpusleuth.render.html_figures import base_layout, plain

if TYPE_CHECKING:
    from gpusleuth.serving.analysis.load import LoadAnalysis
    from gpusleuth.serving.analysis.tokens import Spread
    from gpusleuth.serving.analysis.batch_stats import BatchSeries
    from gpusleuth.serving.analysis.request_model import RequestAnalysis
    from gpusleuth.render.html_page import Page
    from gpusleuth.report.model import Report
    from gpusleuth.serving.report import LlmChart, ServingChart

Cells = Callable[..., str]  # html.py's ``table(head, rows, cls=)`` and ``tile(label, value, note=)``

e = html.escape


def latency_vs_throughput(chart: ServingChart) -> dict[str, Any] | None:
    pts = [i for i, v in enumerate(chart.p50_ms) if v is not None]
    if not pts:
        return None
    labels = [plain(chart.labels[i]) for i in pts]
    x = [round(chart.rps[i], 3) for i in pts]
    hover = f"{plain(chart.x_title)} %{{text}}<br>%{{x:,.1f}} req/s · %{{y:,.1f}} ms<extra>%{{fullData.name}}</extra>"
    data = [{"type": "scatter", "mode": mode, "name": name, "x": x, "text": labels,  # levels named once, on p95
             "textposition": "top left", "y": [None if (v := ys[i]) is None else round(v, 3) for i in pts],
             "marker": {"color": color}, "hovertemplate": hover}
            for name, ys, color, mode in (("p50", chart.p50_ms, "#1f77b4", "lines+markers"),
                                          ("p95", chart.p95_ms, "#d62728", "lines+markers+text"))]
    knee = None if chart.knee is None else chart.p95_ms[chart.knee]
    if chart.knee is not None and knee is not None:
        k = chart.knee
        data.append({"type": "scatter", "mode": "markers", "name": "knee", "x": [round(chart.rps[k], 3)],
                     "y": [round(knee, 3)], "hoverinfo": "skip",
                     "marker": {"size": 18, "color": "rgba(0,0,0,0)", "line": {"color": "#2ca02c", "width": 3}}})
    shapes = []
    if chart.budget_ms is not None:
        shapes.append({"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": chart.budget_ms, "y1": chart.budget_ms,
                       "line": {"color": "#888", "dash": "dash"}})
    return {"data": data, "layout": base_layout(
        360, shapes=shapes, xaxis={"title": {"text": "throughput (2xx answers/s)"}, "gridcolor": "#eee"},
        yaxis={"title": {"text": "latency (ms)"}, "gridcolor": "#eee", "rangemode": "tozero"})}


def rps_per_level(chart: ServingChart) -> dict[str, Any] | None:
    if not chart.rps:
        return None
    labels = [plain(x) for x in chart.labels]
    colors = ["#2ca02c" if i == chart.knee else "#9ecae1" for i in range(len(labels))]
    return {"data": [{"type": "bar", "x": labels, "y": [round(v, 3) for v in chart.rps], "name": "req/s",
                      "marker": {"color": colors}, "hovertemplate": "%{x}: %{y:,.1f} req/s<extra></extra>"}],
            "layout": base_layout(260, xaxis={"title": {"text": plain(chart.x_title)}, "type": "category"},
                                  yaxis={"title": {"text": "req/s"}, "gridcolor": "#eee"}, showlegend=False)}


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v:,.1f}"


def spread_boxes(llm: LlmChart, which: str, title: str) -> dict[str, Any] | None:
    """One box per level from the analysis's percentiles: p25–p75 box, p50 line, whiskers p10 and p99."""
    spreads = getattr(llm, which)
    pts = [i for i, sp in enumerate(spreads) if sp is not None]
    if not pts:
        return None
    labels = [plain(llm.labels[i]) for i in pts]
    sp = [spreads[i] for i in pts]
    data = [{"type": "box", "name": title, "x": labels, "q1": [round(s.p25, 3) for s in sp],
             "median": [round(s.p50, 3) for s in sp], "q3": [round(s.p75, 3) for s in sp],
             "lowerfence": [round(s.p10, 3) for s in sp], "upperfence": [round(s.p99, 3) for s in sp],
             "marker": {"color": "#1f77b4"}, "hoverinfo": "y"}]
    return {"data": data, "layout": base_layout(
        300, xaxis={"title": {"text": plain(llm.x_title)}, "type": "category"},
        yaxis={"title": {"text": f"{title} (ms)"}, "gridcolor": "#eee", "rangemode": "tozero"}, showlegend=False)}


def goodput_vs_level(llm: LlmChart) -> dict[str, Any] | None:
    """Goodput (requests/s meeting every budget) and throughput against the level; the SLO's best ringed."""
    if all(g is None for g in llm.goodput_rps):
        return None
    x = [round(v, 3) for v in llm.x]
    data = [{"type": "scatter", "mode": "lines+markers", "name": "answered req/s", "x": x,
             "y": [round(v, 3) for v in llm.rps], "marker": {"color": "#9ecae1"}},
            {"type": "scatter", "mode": "lines+markers", "name": "goodput req/s (met the SLO)", "x": x,
             "y": [None if g is None else round(g, 3) for g in llm.goodput_rps], "marker": {"color": "#2ca02c"}}]
    best = None if llm.slo_best is None else llm.goodput_rps[llm.slo_best]
    if llm.slo_best is not None and best is not None:
        k = llm.slo_best
        data.append({"type": "scatter", "mode": "markers", "name": "highest level meeting the SLO", "x": [x[k]],
                     "y": [round(best, 3)], "hoverinfo": "skip",
                     "marker": {"size": 18, "color": "rgba(0,0,0,0)", "line": {"color": "#2ca02c", "width": 3}}})
    return {"data": data, "layout": base_layout(
        320, xaxis={"title": {"text": plain(llm.x_title)}, "gridcolor": "#eee"},
        yaxis={"title": {"text": "requests/s"}, "gridcolor": "#eee", "rangemode": "tozero"})}


def _llm_part(pg: Page, load: LoadAnalysis, llm: LlmChart, table: Cells) -> None:
    def pct(sp: Spread | None, key: str) -> str:
        return "–" if sp is None else _ms(getattr(sp, key))

    head = ["", "concurrency" if load.mode == "closed" else "rate/s", "requests", "req/s", "output tok/s",
            "TTFT p50", "p90", "p99", "ITL p50", "p90", "p99", "TPOT p50", "E2E p50", "p99", "failed (by status)"]
    slo = load.slo is not None
    if slo:
        head += ["SLO attainment", "goodput req/s", "goodput tok/s"]
    rows = []
    for i, lv in enumerate(load.levels):
        tk = lv.tokens
        by = ", ".join(f"{e(k)}×{v:,}" for k, v in lv.errors_by.items())
        row = ["SLO →" if slo and i == load.slo_best else "", e(lv.label), f"{lv.requests:,}", f"{lv.rps:,.2f}",
               "–" if tk is None else f"{tk.output_tokens_per_s:,.0f}",
               *(pct(None if tk is None else getattr(tk, part), q) for part, q in (("ttft_ms", "p50"), ("ttft_ms", "p90"),
                                                                   ("ttft_ms", "p99"), ("itl_ms", "p50"),
                                                                   ("itl_ms", "p90"), ("itl_ms", "p99"),
                                                                   ("tpot_ms", "p50"), ("e2e_ms", "p50"),
                                                                   ("e2e_ms", "p99"))),
               f"{lv.failed:,}" + (f" ({by})" if by else "")]
        if slo:
            row += ["–" if lv.slo is None else f"{lv.slo.attainment:.0%}",
                    "–" if lv.slo is None else f"{lv.slo.goodput_rps:,.2f}",
                    "–" if lv.slo is None else f"{lv.slo.goodput_tokens_per_s:,.0f}"]
        rows.append(row)
    pg.add(table(head, rows))
    if slo:
        pg.add(f"<p><b>SLO:</b> {e(load.slo_reason or '')}</p>")
    pg.add("<h3>Time to first token per level</h3><p class=dim>Box p25–p75, line p50, whiskers p10 and p99.</p>")
    pg.figure(spread_boxes(llm, "ttft_ms", "TTFT"), "fig small")
    pg.add("<h3>Inter-token latency per level</h3><p class=dim>Every gap between consecutive tokens of every "
           "answered request.</p>")
    pg.figure(spread_boxes(llm, "itl_ms", "inter-token gap"), "fig small")
    if slo:
        pg.add("<h3>Goodput against load</h3><p class=dim>Requests/s that met every budget, beside all answered "
               "requests/s.</p>")
        pg.figure(goodput_vs_level(llm), "fig small")


def serving_section(pg: Page, report: Report, table: Cells, tile: Cells) -> None:
    """Append the section to ``pg`` (render/html_page.Page); ``table``/``tile`` are html.py's cell helpers."""
    s = report.serving
    if s is None:
        return
    load, o = s.load, s.outcomes
    where = f" <span class=dim>— <code>{e(load.url)}</code></span>" if load.url else ""
    pg.add(f"<section class=headline><h2>Serving under load{where}</h2><div class=tiles>")
    at = "at the knee" if o.at_knee else f"at {e(load.levels[o.level].named)} (no knee)"
    tiles = [tile(f"req/s {at}", f"{o.rps:,.1f}"), tile(f"p95 {at}", f"{_ms(o.p95_ms)} ms")]
    tiles.append(tile("$ per 1M requests", f"${o.dollars_per_million:,.2f}") if o.dollars_per_million is not None
                 else tile("$ per 1M requests", "–", e(o.price_note or "unpriced")))
    tiles.append(tile("accelerator busy", f"{o.gpu_busy:.0%}") if o.gpu_busy is not None
                 else tile("accelerator busy", "–", e(o.gpu_note or "no GPU")))
    if o.energy_j_per_request is not None:
        tiles.append(tile("energy / request", f"{o.energy_j_per_request:,.3g} J"))
    if o.j_per_output_token is not None:
        tiles.append(tile("energy / output token", f"{o.j_per_output_token:,.3g} J", e(o.energy_source or "")))
    elif o.token_energy_note:
        tiles.append(tile("energy / output token", "–", e(o.token_energy_note)))
    if o.dollars_per_million_output_tokens is not None:
        tiles.append(tile("$ per 1M output tokens", f"${o.dollars_per_million_output_tokens:,.2f}"))
    pg.add("".join(tiles) + "</div>")
    pg.add(f"<p><b>Knee:</b> {e(load.knee_reason)}</p>")
    for note in s.notes:
        pg.add(f"<p class=dim>{e(note)}</p>")
    if s.llm is not None:
        _llm_part(pg, load, s.llm, table)
    head = ["", "concurrency" if load.mode == "closed" else "rate/s", "requests", "req/s", "p50 ms", "p95 ms",
            "p99 ms", "max ms", "errors", "timeouts", "dropped", "server CPU (cores)", "GPU busy"]
    rows = [["knee →" if i == load.knee else "", e(lv.label), f"{lv.requests:,}", f"{lv.rps:,.1f}", _ms(lv.p50_ms),
             _ms(lv.p95_ms), _ms(lv.p99_ms), _ms(lv.max_ms), f"{lv.errors:,}", f"{lv.timeouts:,}", f"{lv.dropped:,}",
             "–" if lv.server_cpu_cores is None else f"{lv.server_cpu_cores:.2f}",
             "–" if lv.gpu_busy is None else f"{lv.gpu_busy:.0%}"] for i, lv in enumerate(load.levels)]
    pg.add(table(head, rows))
    pg.add("<h3>Latency against throughput</h3><p class=dim>One point per level; past the knee more load adds "
           "latency, not throughput.</p>")
    pg.figure(latency_vs_throughput(s.chart))
    pg.add("<h3>Requests per second per level</h3>")
    pg.figure(rps_per_level(s.chart), "fig small")
    pg.add("</section>")


PART_COLORS = (("pre", "before the model (pre)", "#ff7f0e"), ("wait", "waiting for a batch", "#bcbd22"),
               ("infer", "model forwards (infer)", "#1f77b4"), ("post", "after the model (post)", "#9467bd"))


def stage_shares(requests: RequestAnalysis) -> dict[str, Any] | None:
    """Stacked bars: each column's pre / infer / post share of request service time (they add to 100 %);
    columns are the load levels, the requests alone in the server, and all requests."""
    cols = [(f"concurrency {lv.concurrency}" if lv.concurrency else f"{lv.rate:g}/s", lv.shares)
            for lv in requests.levels if lv.requests and lv.shares]
    if requests.alone_requests:
        cols.append((f"alone ({requests.alone_requests:,})", requests.alone_shares))
    cols.append((f"all ({requests.count:,})", requests.shares))
    labels = [plain(c) for c, _ in cols]
    data = [{"type": "bar", "name": name, "x": labels, "y": [round(sh.get(key, 0.0) * 100, 2) for _, sh in cols],
             "marker": {"color": color}, "hovertemplate": "%{x}: %{y:.1f} %<extra>" + name + "</extra>"}
            for key, name, color in PART_COLORS]
    return {"data": data, "layout": base_layout(
        300, barmode="stack", xaxis={"type": "category"},
        yaxis={"title": {"text": "% of request time"}, "gridcolor": "#eee", "range": [0, 100]})}


def batch_size_over_time(series: BatchSeries | None) -> dict[str, Any] | None:
    """Requests per batch forward against time (``serving.analysis.batch_stats.BatchSeries``): the mean per bin as a
    line, the largest as dots, each load level's start as a dashed line with its label."""
    if series is None or not any(series.forwards):
        return None
    x = [round(t, 3) for t in series.t_s]
    hover = "%{x:,.1f} s · %{y:,.1f} requests per forward<extra>%{fullData.name}</extra>"
    data = [{"type": "scatter", "mode": "lines", "name": "mean per forward", "x": x, "connectgaps": False,
             "y": [None if v is None else round(v, 2) for v in series.mean], "line": {"color": "#1f77b4"},
             "hovertemplate": hover},
            {"type": "scatter", "mode": "markers", "name": "largest", "x": x, "y": series.max,
             "marker": {"color": "#d62728", "size": 4}, "hovertemplate": hover}]
    shapes, notes = [], []
    for m in series.levels:
        shapes.append({"type": "line", "yref": "paper", "y0": 0, "y1": 1, "x0": round(m.start_s, 3),
                       "x1": round(m.start_s, 3), "line": {"color": "#888", "dash": "dash", "width": 1}})
        notes.append({"x": round(m.start_s, 3), "yref": "paper", "y": 1.0, "xanchor": "left", "showarrow": False,
                      "text": plain(f"c={m.concurrency}" if m.concurrency else f"{m.rate:g}/s"),
                      "font": {"size": 10, "color": "#555"}})
    return {"data": data, "layout": base_layout(
        280, shapes=shapes, annotations=notes, xaxis={"title": {"text": "seconds"}, "gridcolor": "#eee"},
        yaxis={"title": {"text": "requests per forward"}, "gridcolor": "#eee", "rangemode": "tozero"})}


def request_stages_section(pg: Page, report: Report, table: Cells) -> None:
    """Append the per-request stages of a recorded server (nothing for a training job); ``table`` is
    html.py's."""
    r = report.requests
    if r is None or not r.count:
        return
    pg.add("<section><h2>Where each request's time went</h2>")
    q = r.shares.get("queue")
    queue = (f" Queued before a worker took them: {q:.1%} of latency, {r.queue_p95_share or 0:.1%} of the "
             f"p95 latency." if q is not None else " Queue: not measured for this server.")
    pg.add(f"<p class=dim>{r.count:,} requests with a model forward, inside the server: from the request's "
           "start to the model's first forward (pre), the forwards (infer), after them to the response (post)."
           f"{e(queue)} Requests alone in the server show what one costs with nothing to wait for.</p>")
    pg.figure(stage_shares(r), "fig small")
    b = r.batching
    if b is not None:
        pg.add(f"<h3>Batches</h3><p class=dim>{b.requests:,} requests ran in {b.forwards_joined:,} batch forwards "
               f"outside the request (a batcher's); they waited {b.wait_share:.1%} of their time for their batch. "
               "Per level: the forwards that started in it and the requests each served.</p>")
        rows = [[e(f"concurrency {lv.concurrency}" if lv.concurrency else f"{lv.rate:g}/s"), f"{lv.batch_forwards:,}",
                 f"{lv.batch_size_p50:g}" if lv.batch_size_p50 is not None else "–",
                 f"{lv.batch_size_p90:g}" if lv.batch_size_p90 is not None else "–",
                 f"{lv.batch_size_max}" if lv.batch_size_max is not None else "–",
                 f"{lv.shares.get('wait', 0.0):.1%}"] for lv in r.levels if lv.batch_forwards]
        if not rows:
            rows = [["all", f"{b.forwards_joined:,}", f"{b.size_p50:g}", f"{b.size_p90:g}", f"{b.size_max}",
                     f"{b.wait_share:.1%}"]]
        pg.add(table(["level", "batch forwards", "requests per batch p50", "p90", "max", "batch wait"], rows))
        pg.figure(batch_size_over_time(b.over_time))
    if r.stages:
        rows = [[e(st.name), f"{st.share:.1%}", f"{st.p50_ms:,.2f}", f"{st.p95_ms:,.2f}", f"{st.requests:,}"]
                for st in r.stages]
        pg.add("<h3>Named stages (<code>gpusleuth.stage</code>)</h3>")
        pg.add(table(["stage", "share of request time", "p50 ms", "p95 ms", "requests"], rows))
    pg.add("</section>")

