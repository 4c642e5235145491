"""The serving section in the terminal: one row per load level, the knee marked, then the outcomes at it.

Formats ``report.serving`` (serving/report.py); computes nothing. The URL came from the user's command line
and is printed through markup escaping (the console itself is a SafeConsole)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from gpusleuth.report.model import Report

if TYPE_CHECKING:
    from gpusleuth.serving.analysis.load import LoadAnalysis
    from gpusleuth.serving.analysis.tokens import Spread
    from gpusleuth.serving.report import ServingSection


def _ms(v: float | None) -> str:
    return "–" if v is None else (f"{v:,.1f}" if v < 1000 else f"{v:,.0f}")


def _count(n: int) -> str:
    return f"{n:,}" if n else "·"


def _p(spread: Spread | None, key: str) -> str:
    return "–" if spread is None else _ms(getattr(spread, key))


def _llm_table(load: LoadAnalysis) -> RichTable:
    """An LLM load's levels in one screen-wide table: throughput in requests and tokens, TTFT, inter-token
    gaps, TPOT and end-to-end percentiles, failures; with an SLO its attainment and goodput."""
    slo = load.slo is not None
    t = RichTable(box=None, padding=(0, 1), pad_edge=False)
    cols = ["", "conc" if load.mode == "closed" else "rate/s", "reqs", "req/s", "tok/s", "TTFT p50", "p99",
            "ITL p50", "p99", "TPOT p50", "E2E p50", "p99", "failed"]
    if slo:
        cols += ["SLO met", "goodput/s"]
    for c in cols:
        t.add_column(c, justify="right")
    for i, lv in enumerate(load.levels):
        tk = lv.tokens
        ttft, itl, tpot, e2e = (None,) * 4 if tk is None else (tk.ttft_ms, tk.itl_ms, tk.tpot_ms, tk.e2e_ms)
        mark = "[bold green]knee →[/]" if i == load.knee else ""
        if slo and i == load.slo_best:
            mark = "[bold green]SLO →[/]"
        row = [mark, lv.label, f"{lv.requests:,}", f"{lv.rps:,.1f}",
               "–" if tk is None else f"{tk.output_tokens_per_s:,.0f}",
               _p(ttft, "p50"), _p(ttft, "p99"), _p(itl, "p50"), _p(itl, "p99"), _p(tpot, "p50"), _p(e2e, "p50"),
               _p(e2e, "p99"), _count(lv.failed)]
        if slo:
            row += ["–" if lv.slo is None else f"{lv.slo.attainment:.0%}",
                    "–" if lv.slo is None else f"{lv.slo.goodput_rps:,.2f}"]
        t.add_row(*row)
    return t


def render_serving(report: Report, console: Console) -> None:
    s = report.serving
    if s is None:
        return
    load, o = s.load, s.outcomes
    console.print()
    mode = "closed loop (workers)" if load.mode == "closed" else "open loop (requests started per second)"
    if load.mode == "open" and load.arrivals and load.arrivals != "constant":
        mode += f", {load.arrivals} arrivals"
    where = f" — {escape(load.url)}" if load.url else ""
    console.print(f"[bold]Serving under load[/]{where} · {mode}")
    if s.llm is not None:
        _render_llm(s, console)
        _prompt_cache(report, console)
        return
    t = RichTable(box=None, padding=(0, 1), pad_edge=False)
    for col in ("", "concurrency" if load.mode == "closed" else "rate/s", "requests", "req/s", "p50 ms", "p95 ms",
                "p99 ms", "max ms", "errors", "timeouts"):
        t.add_column(col, justify="right")
    if load.mode == "open":
        t.add_column("dropped", justify="right")
    server_cpu = any(lv.server_cpu_cores is not None for lv in load.levels)
    if server_cpu:
        t.add_column("server CPU", justify="right")
    if any(lv.gpu_busy is not None for lv in load.levels):
        t.add_column("GPU busy", justify="right")
    for i, lv in enumerate(load.levels):
        knee = i == load.knee
        row = ["[bold green]knee →[/]" if knee else "", lv.label, f"{lv.requests:,}", f"{lv.rps:,.1f}",
               _ms(lv.p50_ms), _ms(lv.p95_ms), _ms(lv.p99_ms), _ms(lv.max_ms), _count(lv.errors),
               _count(lv.timeouts)]
        if load.mode == "open":
            row.append(_count(lv.dropped))
        if server_cpu:
            row.append("–" if lv.server_cpu_cores is None else f"{lv.server_cpu_cores:.2f} cores")
        if any(x.gpu_busy is not None for x in load.levels):
            row.append("–" if lv.gpu_busy is None else f"{lv.gpu_busy:.0%}")
        t.add_row(*row, style="bold" if knee else None)
    console.print(t)
    _failed_by(load, console)
    console.print(f"  knee: {escape(load.knee_reason)}")
    at = "at the knee" if o.at_knee else f"at {load.levels[o.level].named} (no knee)"
    parts = [f"{o.rps:,.1f} req/s", f"p95 {_ms(o.p95_ms)} ms"]
    parts.append(f"${o.dollars_per_million:,.2f} per 1M requests" if o.dollars_per_million is not None
                 else escape(o.price_note or "unpriced"))
    parts.append(f"accelerator busy {o.gpu_busy:.0%}" if o.gpu_busy is not None
                 else f"accelerator busy – ({escape(o.gpu_note or 'no GPU')})")
    if o.energy_j_per_request is not None:
        parts.append(f"{o.energy_j_per_request:,.2f} J per request")
    console.print(f"  {at}: " + " · ".join(parts))
    for note in s.notes:
        console.print(f"  [yellow]![/] {escape(note)}")


def _render_llm(s: ServingSection, console: Console) -> None:
    load = s.load
    console.print(_llm_table(load))
    console.print("  [dim]ms: TTFT = time to first token, ITL = every gap between tokens, TPOT = per output token "
                  "after the first, E2E = whole request; tok/s = output tokens[/]")
    _failed_by(load, console)
    _engine_clock(load, console)
    if load.slo is not None:
        budgets = ", ".join(f"{k[:-3]} ≤ {v:,.0f} ms" for k, v in load.slo.items() if k.endswith("_ms"))
        console.print(f"  SLO ({escape(budgets)}; goodput = requests/s meeting every budget): "
                      f"{escape(load.slo_reason or '')}")
    console.print(f"  knee (throughput): {escape(load.knee_reason)}")
    _token_costs(s, console)
    for note in s.notes:
        console.print(f"  [yellow]![/] {escape(note)}")


def _engine_clock(load: LoadAnalysis, console: Console) -> None:
    """Each level's requests as the engine itself timed them (llama.cpp's ``timings``), and its prompt cache."""
    parts = []
    for lv in load.levels:
        tk = lv.tokens
        if tk is None or (tk.engine is None and tk.cached_share is None):
            continue
        e = tk.engine
        text = "" if e is None else (f"prefill {_ms(e.prefill_ms.p50)} · decode {_ms(e.decode_ms.p50)} · outside "
                                     f"{_ms(e.outside_ms.p50)} ms ({e.outside_share:.0%} of E2E)")
        if tk.cached_share is not None:
            text += ("; " if text else "") + f"prompt from cache {tk.cached_share:.0%}"
        parts.append(f"{lv.named}: {text}")
    if parts:
        console.print("  the engine's own clock per request, p50 (outside = waiting for a slot, HTTP, scheduling): "
                      + " | ".join(parts))


def _token_costs(s: ServingSection, console: Console) -> None:
    """Joules and dollars per output token at the knee (or the level the outcomes are read at), or why not."""
    o, load = s.outcomes, s.load
    at = "at the knee" if o.at_knee else f"at {load.levels[o.level].named}"
    parts = []
    if o.j_per_output_token is not None:
        parts.append(f"{o.j_per_output_token:,.3g} J per output token ({escape(o.energy_source or '')}, the GPUs' "
                     "whole energy over the level, idle moments included)")
    if o.dollars_per_million_output_tokens is not None:
        parts.append(f"${o.dollars_per_million_output_tokens:,.2f} per 1M output tokens")
    if parts:
        console.print(f"  {at}: " + " · ".join(parts))
    for note in (o.token_energy_note, o.input_token_note):
        if note:
            console.print(f"  [dim]{escape(note)}[/]")


def _prompt_cache(report: Report, console: Console) -> None:
    """The share of each level's prompt tokens the engine answered from its prefix cache, where its /metrics say."""
    engine, load = report.engine, report.serving.load if report.serving is not None else None
    if engine is None or load is None:
        return
    kind = "concurrency" if load.mode == "closed" else "rate"
    labels = {lv.level: f"{kind} {lv.label}" for lv in load.levels}
    parts = [f"{labels.get(e.level, e.level)}: {e.cached_prompt_share:.0%}" for e in engine.levels
             if e.cached_prompt_share is not None]
    if parts:
        console.print("  prompt tokens the engine answered from its prefix cache (its /metrics) — "
                      + escape("; ".join(parts)))


def _failed_by(load: LoadAnalysis, console: Console) -> None:
    """Failures per level by HTTP status or cause: a 429 (shed load) is not a 500 (a crash) nor a 302."""
    failed = [f"{lv.label}: " + ", ".join(f"{k}×{v:,}" for k, v in lv.errors_by.items())
              for lv in load.levels if lv.errors_by]
    if failed:
        console.print("  failed by status or cause — " + escape("; ".join(failed)))
