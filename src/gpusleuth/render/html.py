"""Self-contained HTML report: one file, works offline, charts drawn by plotly.js inlined into the page.

Formatting only (docs/architecture.md): numbers come from the typed Report and its ``display`` data
(analysis/timeseries.py); figures are specified in render/html_figures.py.

Safety: everything in the page that came from a trace, a command line or a run directory is untrusted.
Text goes into the HTML through ``html.escape``; chart data goes into one
``<script type="application/json">`` block whose ``<``, ``>``, ``&`` and line separators are
``\\u``-escaped, so no string (``</script>`` included) can end the block or open a tag; the page's own
script reads it with ``JSON.parse`` (no ``eval``, no ``innerHTML``); plotly labels are entity-escaped
(html_figures.plain). The browser test plants payloads in kernel/op names and the command line and
checks that nothing runs.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpusleuth._version import __version__
from gpusleuth.errors import GpusleuthError
from gpusleuth.render import html_figures as F
from gpusleuth.render.html_page import Page
from gpusleuth.serving.render.html import request_stages_section, serving_section
from gpusleuth.render.labels import CATEGORY_LABELS, category_labels, cpu_only_note
from gpusleuth.render.text import clip, inert
from gpusleuth.render.units import dollars, human_bytes
from gpusleuth.report.model import SCHEMA, Report

if TYPE_CHECKING:
    from gpusleuth.analysis.telemetry import Dist
    from gpusleuth.analysis.trace import TraceAnalysis
    from gpusleuth.analysis.trace.gaps import GapHistogram

MISSING_PLOTLY = ("the HTML report needs the plotly package (it inlines plotly.js so the file works "
                  "offline); install it with: pip install 'plotly>=5'")


class HtmlUnavailable(GpusleuthError):
    """The plotting library is not installed (a --no-deps install): said in one sentence by the CLI."""


def plotly_js() -> str:
    """plotly.js as shipped inside the plotly wheel (read as a file: no plotly Python import needed)."""
    try:
        import importlib.resources as res

        text = (res.files("plotly") / "package_data" / "plotly.min.js").read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, OSError) as exc:
        raise HtmlUnavailable(MISSING_PLOTLY) from exc
    # cannot occur in the shipped bundle today; if a future one has it, keep it from closing our tag
    return text.replace("</script", "<\\/script")


def script_json(obj: Any) -> str:
    """JSON safe to place inside <script type="application/json">: no '<', '>' or '&' survive."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


e = html.escape  # every untrusted string passes through this
TITLE_MAX = 200  # characters of a page title


def _num(v: Any, fmt: str = "{:,.2f}", none: str = "–") -> str:
    if v is None:
        return none
    try:
        return fmt.format(v)
    except (TypeError, ValueError):
        return e(str(v))


def _ms(s: float | None) -> str:
    return "–" if s is None else (f"{s * 1e3:,.1f} ms" if s < 10 else f"{s:,.2f} s")


def _pct(x: float | None, digits: int = 0) -> str:
    return "–" if x is None else f"{x * 100:.{digits}f}%"




def table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """Cells are already-escaped HTML fragments."""
    h = "".join(f"<th>{c}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>'


# --- sections -----------------------------------------------------------------------------------------

def _header(pg: Page, report: Report) -> None:
    r = report.run
    pg.add(f"<header><h1>gpusleuth report <span class=dim>— {e(r.label or '')}</span></h1>")
    facts = []
    if r.command:
        facts.append(f"command <code>{e(' '.join(map(str, r.command)))}</code>")
    elif r.path:
        facts.append(f"source <code>{e(str(r.path))}</code>")
    if r.exit_code is not None:
        facts.append(f"exit code {e(str(r.exit_code))}" + (f" ({e(str(r.signal))})" if r.signal else ""))
    if r.wall_s is not None:
        facts.append(f"wall {r.wall_s:,.2f} s")
    if r.stopped_by:
        facts.append(f"stopped by {e(str(r.stopped_by))}")
    gpus = [g.get("name") for g in (r.hardware or {}).get("gpus") or [] if isinstance(g, dict)]
    if gpus:
        facts.append("GPUs: " + e(", ".join(str(g) for g in gpus if g)))
    pg.add("<p class=meta>" + " · ".join(facts) + "</p></header>")


def tile(label: str, value: str, note: str = "") -> str:
    return (f'<div class=tile><div class=tv>{value}</div><div class=tl>{label}</div>'
            + (f'<div class=tn>{note}</div>' if note else "") + "</div>")


def _headline_run(pg: Page, report: Report) -> None:
    o, h = report.outcomes, report.headline
    if o is None:
        return
    st = h.steady if h is not None else None
    tiles = [tile("steps", _num(o.steps.steps, "{:,}"))]
    if st is not None and st.step_time_p50_s is not None:  # the steady state: the headline's definition
        tiles.append(tile("step time (p50)", _ms(st.step_time_p50_s), f"p95 {_ms(st.step_time_p95_s)}"))
    if st is not None and st.samples_per_s:
        tiles.append(tile("samples / s", _num(st.samples_per_s, "{:,.0f}"), "steady state"))
    if o.steps.steps:  # a loop with no fetch and no forward seen has its wait unmeasured, never 0 %
        measured = o.steps.data_wait_measured_steps != 0
        tiles.append(tile("of step time waiting on data", _pct(o.steps.data_wait_share_of_steps) if measured
                          else "unmeasured"))
    if h is not None:
        tiles.append(tile("goodput", _pct(h.goodput.goodput), "productive ÷ wall time"))
        if h.mfu.mfu is not None:
            tiles.append(tile("MFU", _pct(h.mfu.mfu, 1), e(str(h.mfu.convention or ""))[:80]))
        if h.energy is not None and h.energy.per_sample_j:
            tiles.append(tile("energy / sample", f"{h.energy.per_sample_j:.3g} J"))
        if h.cost is not None:
            tiles.append(tile("cost of this run", f"${h.cost.per_run:,.2f}"))
    pg.add('<section class=headline><h2>Outcome</h2><div class=tiles>' + "".join(tiles) + "</div>")
    pg.add("<h3>Where the wall time went</h3>")
    pg.figure(F.wall_time_bar(o.time_share, o.time_s), "fig small")
    _fix_first(pg, report)
    pg.add("</section>")


def _fix_first(pg: Page, report: Report) -> None:
    """The top-ranked finding (the diagnosis ranks them; a "none" finding only ranks first when alone)."""
    if not report.findings:
        return
    f = report.findings[0]
    if f.severity == "none":
        pg.add(f'<p class=fixfirst><b>{e(f.title)}</b></p>')
        return
    g = f.estimated_gain
    worth = f" — worth about {_pct(g.wall_share)} of wall time" if g is not None and g.wall_share else ""
    pg.add(f'<p class=fixfirst><b>Fix first:</b> {e(f.title)}{worth}.<br><span class=dim>fix:</span> '
           f'<code>{e(f.fix)}</code></p>')


def _headline_trace(pg: Page, report: Report) -> None:
    tiles = []
    for r in report.ranks:
        sec = r.idle_causes.seconds
        top = max(sec.items(), key=lambda kv: kv[1]) if sec else None
        who = f"rank {r.rank}" if r.rank is not None else e(r.label or "trace")
        note = ""
        if r.cpu_only:  # no device to be idle: the step's time is the host's
            if r.step_stats.count:
                tiles.append(tile(f"{who}: step time (median)", _ms(r.step_stats.median_s),
                                  f"{r.step_stats.count} steps · CPU-only trace (no device)"))
            continue
        if top and top[1] > 0:
            share = r.idle_causes.share[top[0]]
            note = f"largest idle cause: {e(CATEGORY_LABELS.get(top[0], top[0]))} ({_pct(share)} of idle)"
        tiles.append(tile(f"{who}: device idle", _pct(r.idle, 1), note))
        if r.step_stats.count:
            tiles.append(tile(f"{who}: step time (median)", _ms(r.step_stats.median_s),
                              f"{r.step_stats.count} steps"))
    pg.add('<section class=headline><h2>Outcome</h2><div class=tiles>' + "".join(tiles) + "</div>")
    _fix_first(pg, report)
    pg.add("</section>")


def _findings(pg: Page, report: Report) -> None:
    fs = report.findings
    if not fs and not report.not_evaluated:
        return
    pg.add("<section><h2>Findings <span class=dim>(ranked by estimated gain)</span></h2>")
    for i, f in enumerate(fs, 1):
        ev = [[e(str(x.name)), e(_num(x.value, "{:,.4g}") if isinstance(x.value, (int, float)) else str(x.value)),
               e(str(x.unit or "")), f"<span class=dim>{e(str(x.source or ''))}</span>"] for x in f.evidence]
        g = f.estimated_gain
        gain = ""
        if g is not None:
            money = f", ${g.dollars_per_run:,.2f} per run" if g.dollars_per_run is not None else ""
            gain = (f"<p><b>Estimated gain:</b> {_pct(g.step_share)} of step time, "
                    f"{_num(g.seconds_per_run, '{:,.1f}')} s per run{money}, "
                    f"{_num(g.speedup, '{:.2f}')}× throughput <span class=dim>— {e(g.method)}</span></p>")
        pg.add(f'<div class="finding sev-{e(f.severity)}"><h3>{i}. <span class=sev>{e(f.severity.upper())}</span> '
               f'<code>{e(f.cause)}</code> {e(f.title)}</h3>'
               f'<p>{e(f.summary or "")}</p>'
               + (table(["evidence", "value", "unit", "source"], ev, "ev") if ev else "")
               + gain + f'<p><b>Fix:</b></p><pre>{e(f.fix or "")}</pre>'
               f'<p class=dim>confidence: {e(f.confidence)}</p></div>')
    if report.missing_summary:
        n = len(report.not_evaluated)
        pg.add(f"<details><summary>Not evaluated: {n} rule(s) lacked their data — what to record</summary><ul>"
               + "".join(f"<li><b>{len(g.rules)} check(s) need {e(g.data)}</b> — {e(g.how)} "
                         f"<span class=dim>({e(', '.join(g.rules))})</span></li>" for g in report.missing_summary)
               + "</ul></details>")
    if report.not_applicable:
        pg.add(f"<p class=dim>{len(report.not_applicable)} training-loop check(s) do not apply: "
               f"{e(report.not_applicable_why)} ({e(', '.join(m.rule for m in report.not_applicable))}).</p>")
    pg.add("</section>")


def _timeline(pg: Page, report: Report) -> None:
    disp = report.display
    fig = F.timeline(disp)
    if fig is None or disp is None:
        return
    down = [s for s in disp.series if s.points > len(s.t)]
    note = (f" Series longer than {disp.max_points:,} points are shown as per-bucket minimum and maximum "
            f"({len(down)} of {len(disp.series)} here), so short dips stay visible; exact numbers are in the "
            "tables.") if down else ""
    pg.add("<section><h2>Timeline</h2><p class=dim>One time axis for every signal: drag to zoom (all panels "
           f"follow), double-click to reset. Phases are shaded; throttled stretches are red on the clocks "
           f"panel.{note}</p>")
    pg.figure(fig, "fig tall")
    pg.add("</section>")


def _dist(x: Dist | None, unit: str = "%") -> str:
    return "–" if not x else f"{x['mean']:.0f}{unit} (p5 {x['p5']:.0f}, p95 {x['p95']:.0f})"


def _telemetry_tables(pg: Page, report: Report) -> None:
    rows = []
    for g in report.gpus:
        thr = ", ".join(f"{e(str(k))} {v:.0%}" for k, v in (g.throttled_share or {}).items()) or "no"
        rows.append([f"{g.index} {e(str(g.name or ''))}", _dist(g.util_gpu), _dist(g.sm_active),
                     _dist(g.tensor_active), f"{human_bytes(g.mem_used_max_bytes)} / {human_bytes(g.mem_total_bytes)}",
                     _dist(g.power_w, " W"), _dist(g.sm_clock_mhz, " MHz"), thr])
    h = report.host
    if not rows and not h:
        return
    pg.add("<section><h2>Telemetry summary</h2>")
    if rows:
        pg.add(table(["GPU", "util", "SM active", "tensor active", "peak memory", "power", "SM clock", "throttled"], rows))
        scope = report.gpu_scope
        if scope is not None and (scope.others or not scope.decided or len(scope.sampled) > 1):
            others = f"; not the job's (left out): {e(', '.join(map(str, scope.others)))}" if scope.others else ""
            pg.add(f"<p class=dim>The job's GPUs — {e(scope.how)}{others}</p>")
        empty = [f"GPU {g.index} {e(k)}: {e(v)}" for g in report.gpus for k, v in g.empty.items()]
        if empty:
            pg.add("<p class=dim>" + "<br>".join(empty) + "</p>")
    elif report.gpu_note:
        pg.add(f"<p class=dim>{e(str(report.gpu_note))} — host telemetry only</p>")
    if h:
        procs = [[e(str(p.pid)), e(str(p.role)), e(str(p.name or "")),
                  _num((p.cpu_pct or {}).get("mean"), "{:.0f}%"), human_bytes(p.rss_max_bytes)]
                 for p in h.processes]
        pg.add(f"<p>Host CPU mean {_num((h.cpu_pct or {}).get('mean'), '{:.0f}%')} of "
               f"{e(str(h.logical_cores or '?'))} cores · iowait mean "
               f"{_num((h.iowait_pct or {}).get('mean'), '{:.1f}%')} · disk read "
               f"{human_bytes(h.disk_read_bytes)}, written {human_bytes(h.disk_write_bytes)}</p>")
        if procs:
            pg.add(table(["pid", "role", "name", "CPU (mean, % of a core)", "peak RSS"], procs))
    pg.add("</section>")


def _communication(pg: Page, report: Report) -> None:
    """The distributed job's collectives across ranks (``report.comm``), as the terminal shows them."""
    comm = report.comm
    if comm is None:
        return
    rows = [[e(str(r.rank)), e(str(r.host or "–")), _ms(r.step_s), f"{_ms(r.comm_s)} ({_pct(r.comm_share)})",
             f"{_ms(r.wait_s)} ({_pct(r.wait_share)})", _ms(r.transfer_s), _ms(r.data_wait_s), _ms(r.other_s),
             _pct(r.last_share)] for r in comm.ranks]
    unit = "GPU-h" if comm.hours_unit == "GPU-hours" else "process-h"
    cost = f"{comm.comm_gpu_hours:.4g} {unit} in collectives, {comm.wait_gpu_hours:.4g} {unit} of it waiting"
    if comm.comm_dollars is not None and comm.wait_dollars is not None:
        cost += f" ({dollars(comm.comm_dollars)} and {dollars(comm.wait_dollars)})"
    pg.add(f"<section><h2>Communication across {len(comm.ranks)} ranks</h2>"
           f"<p class=dim>{e(comm.clock)}; per-step medians</p>"
           + table(["rank", "host", "step", "in collectives", "waiting", "transfer", "data wait", "other",
                    "arrived last"], rows) + f"<p>{cost}</p></section>")


def _rank(pg: Page, r: TraceAnalysis, hist: GapHistogram | None) -> None:
    who = f"rank {r.rank}" if r.rank is not None else "trace"
    pg.add(f"<section class=rank><h2>Profiler trace · {e(who)} <span class=dim>{e(str(r.label or ''))}"
           + (f" · {e(str(r.device))}" if r.device else "") + "</span></h2>")
    cpu_only = r.cpu_only
    labels = category_labels(cpu_only)
    if cpu_only:
        pg.add(f"<p>{e(cpu_only_note(None))}</p><h3>Host time per step</h3><p class=dim>Each bar sums exactly to "
               "the step time.</p>")
    else:
        pg.add(f"<p>Device span {_ms(r.device_span_s)}: compute {_pct(r.compute, 1)}, non-compute "
               f"{_pct(r.non_compute, 1)}, idle {_pct(r.idle, 1)} <span class=dim>(HTA-comparable)</span></p>")
        pg.add("<h3>Exposed time per step</h3><p class=dim>Each bar sums exactly to the step time; warm colours "
               "are time the device sat idle, by cause.</p>")
    pg.figure(F.step_partition(r.steps, r.trace_partition, labels))
    if hist is not None and not cpu_only:  # no device timeline to have idle gaps
        pg.add(f"<h3>Idle gaps by size and cause</h3><p class=dim>{hist.gaps:,} gaps in the device timeline, "
               "each labelled by the cause that took most of it.</p>")
        pg.figure(F.gap_histogram(hist))
    k = r.kernels
    if k.top:
        pg.add(f"<h3>Kernel breakdown</h3><p class=dim>{k.kernels:,} kernels, "
               f"{k.distinct_names:,} names, {_ms(k.kernel_time_s)} of kernel time.</p>")
        pg.figure(F.kernel_bars(k))
        rows = [[e(x.name), e(x.family), f"{x.count:,}", f"{x.total_s * 1e3:,.3f}",
                 _pct(x.share, 1), _num(x.mean_us, "{:,.1f}"), _num(x.median_us, "{:,.1f}"),
                 _num(x.min_us, "{:,.1f}"), _num(x.max_us, "{:,.1f}")] for x in k.top]
        pg.add("<details><summary>Top kernels, exact numbers</summary>" + table(
            ["kernel", "family", "count", "total ms", "share", "mean µs", "median µs", "min µs", "max µs"],
            rows, "kernels") + "</details>")
    if r.steps:
        cats = [c for c in labels if any(c in s.partition for s in r.steps)]
        rows = [[f"#{s.step}", f"{s.duration_s * 1e3:,.3f}"]
                + [f"{s.partition.get(c, 0.0) * 1e3:,.3f}" for c in cats] for s in r.steps]
        pg.add("<details><summary>Exposed time per step, exact (ms)</summary>" + table(
            ["step", "step time"] + [e(labels[c]) for c in cats], rows, "num") + "</details>")
    for title, xs in (("Data issues", r.issues), ("Losses", r.losses)):
        if xs:
            pg.add(f"<h3>{title}</h3><ul>" + "".join(f"<li>{e(str(x))}</li>" for x in xs) + "</ul>")
    pg.add("</section>")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1280px;
padding:16px 24px;color:#222;background:#fafafa}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:22px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:14px 0 6px}.dim{color:#777;font-weight:normal}.meta{color:#444;font-size:13px}
code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;background:#f0f0f0;border-radius:3px}
code{padding:1px 4px;word-break:break-all}pre{padding:8px;white-space:pre-wrap}
section{background:#fff;border:1px solid #e5e5e5;border-radius:6px;padding:6px 16px 12px;margin:14px 0}
.tiles{display:flex;flex-wrap:wrap;gap:10px}.tile{border:1px solid #e3e3e3;border-radius:6px;padding:8px 14px;min-width:140px}
.tv{font-size:24px;font-weight:600}.tl{font-size:12px;color:#555}.tn{font-size:11px;color:#888;max-width:260px}
.fixfirst{background:#fff7e6;border-left:4px solid #ff7f0e;padding:8px 12px}
.finding{border-left:5px solid #bbb;padding:2px 12px;margin:10px 0}.sev-high{border-color:#d62728}
.sev-moderate{border-color:#ff7f0e}.sev-none{border-color:#2ca02c}.sev{font-size:12px;letter-spacing:.05em}
table{border-collapse:collapse;font-size:12px;margin:6px 0}th,td{border-bottom:1px solid #eee;padding:3px 8px;
text-align:left;vertical-align:top}table.num td,table.kernels td{text-align:right}
table.kernels td:first-child{text-align:left;max-width:520px;word-break:break-all}
.fig{width:100%;min-height:200px}.fig.small{min-height:120px}footer{color:#888;font-size:12px;margin:20px 0}
details{margin:8px 0}summary{cursor:pointer;color:#1f4e79}
.better,.pass{color:#2ca02c}.worse,.fail{color:#d62728}table.findings td{max-width:340px}
span.sev-high{color:#d62728;font-weight:600}span.sev-moderate{color:#ff7f0e;font-weight:600}span.sev-none{color:#2ca02c}
"""

BOOT = """(function(){
var el=document.getElementById('gs-figures');var figs=JSON.parse(el.textContent);
var cfg={responsive:true,displaylogo:false,modeBarButtonsToRemove:['select2d','lasso2d']};
var ids=Object.keys(figs),done=0;
ids.forEach(function(id){var f=figs[id];Plotly.newPlot(document.getElementById(id),f.data,f.layout,cfg)
.then(function(){done+=1;if(done===ids.length){document.body.setAttribute('data-gs-rendered',String(done));}});});
if(!ids.length){document.body.setAttribute('data-gs-rendered','0');}
})();"""


def render_html(report: Report) -> str:
    """The whole page for one report (a recorded run and/or profiler traces), as one string, from the typed
    Report (the same object the terminal renderer reads; the JSON is another rendering of it)."""
    pg = Page()
    _header(pg, report)
    if report.outcomes is not None and not (report.serving is not None and not report.outcomes.steps.steps):
        _headline_run(pg, report)
    elif report.ranks:
        _headline_trace(pg, report)
    serving_section(pg, report, table, tile)
    request_stages_section(pg, report, table)
    _findings(pg, report)
    _timeline(pg, report)
    _telemetry_tables(pg, report)
    _communication(pg, report)
    disp = report.display
    hists = {h.rank_label: h for h in (disp.gap_histograms if disp is not None else [])}
    for r in report.ranks:
        _rank(pg, r, hists.get(str(r.label or "")))
    if report.losses:
        pg.add("<section><h2>Data losses and salvage</h2><ul>"
               + "".join(f"<li>{e(str(x))}</li>" for x in report.losses) + "</ul></section>")
    return document(f"gpusleuth — {report.run.label or 'report'}", pg, f"report schema {SCHEMA}")


def document(title: str, pg: Page, schema: str) -> str:
    """The self-contained page around ``pg``: styles, figure data, plotly.js and the boot script inlined."""
    js = plotly_js()
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width, initial-scale=1'>"
        # offline and inert: no network; only our own two scripts (by hash) may run — a second line of
        # defence behind the escaping ('unsafe-eval': plotly's WebGL traces compile shaders at run time)
        "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; "
        f"script-src {_sha(js)} {_sha(BOOT)} 'unsafe-eval'; style-src 'unsafe-inline'; "
        "img-src data: blob:; font-src data:; connect-src 'none'\">"
        # a title is shown by the browser's tab and window manager, not the page: no control characters
        # (a raw ESC from a job label stayed there), and not 100 kB of label
        f"<title>{e(clip(inert(title), TITLE_MAX))}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(pg.parts)
        + f"\n<footer>gpusleuth {e(__version__)} · {e(schema)} · charts: plotly.js, "
        "inlined (this file needs no network)</footer>\n"
        + f'<script type="application/json" id="gs-figures">{script_json(pg.figures)}</script>\n'
        + f"<script>{js}</script>\n<script>{BOOT}</script>\n</body></html>\n"
    )


def _sha(script: str) -> str:
    import base64
    import hashlib

    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode() + "'"


def write_html(report: Report, path: Path) -> int:
    """Write the page; returns its size in bytes."""
    return write_page(render_html(report), path)


def write_page(text: str, path: Path) -> int:
    # a file name that is not UTF-8 reaches the page as lone surrogates (surrogateescape): shown escaped
    data = text.encode("utf-8", "backslashreplace")
    Path(path).write_bytes(data)
    return len(data)
