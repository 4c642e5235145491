"""Terminal output of ``gpusleuth sweep`` and ``gpusleuth bench``. Formats the results; computes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table
from gpusleuth.render.units import human_bytes

if TYPE_CHECKING:
    from gpusleuth.experiments.bench_result import BenchResult
    from gpusleuth.experiments.maxbatch import MaxBatchResult
    from gpusleuth.experiments.sweep_result import SweepResult
    from gpusleuth.experiments.stats import Band

BAR = 28


def _num(x: float | None, fmt: str = ",.1f") -> str:
    return "–" if x is None else format(x, fmt)


def _ms(s: float | None) -> str:
    return "–" if s is None else f"{s * 1e3:.1f} ms"




def _band(b: Band | None) -> str:
    if b is None:
        return "–"
    f = ",.0f" if b.median >= 100 else ",.2f"
    return f"{b.median:{f}} [{b.lo:{f}}–{b.hi:{f}}]" + ("*" if b.assumed else "")


def _bar(value: float | None, top: float | None) -> str:
    if not value or not top:
        return ""
    n = max(1, round(BAR * value / top))
    return "█" * n


def render_sweep(res: SweepResult, console: Console) -> None:
    console.rule("[bold]gpusleuth sweep[/]")
    console.print(f"command: [cyan]{escape(' '.join(res.command))}[/]")
    bounds = []
    if res.steps:
        bounds.append(f"{res.steps} steps after {res.warmup} warm-up")
    if res.duration_s:
        bounds.append(f"at most {res.duration_s:g} s")
    console.print(f"{len(res.configs)} configurations × {res.repeat} repeats (interleaved) · "
                  + " · ".join(bounds) + (f" · runs in {escape(res.out_dir)}" if res.out_dir else ""))
    unit = res.configs[0].unit if res.configs else "samples/s"
    base = res.configs[0].throughput.median if res.configs and res.configs[0].throughput else None
    t = Table(show_edge=False, pad_edge=False)
    columns: tuple[tuple[str, JustifyMethod], ...] = (("configuration", "left"), ("ok", "right"), (f"{unit} median [band]", "right"),
                      ("vs first", "right"), ("step p50", "right"), ("step p95", "right"), ("data wait", "right"),
                      ("GPU util", "right"), ("CPU cores", "right"), ("peak mem", "right"), ("J/1k", "right"),
                      ("$/1k", "right"))
    for col, just in columns:
        t.add_column(col, justify=just)
    for c in res.configs:
        ok = f"{len(c.ok_attempts)}/{len(c.attempts)}"
        label = escape(c.label)
        if res.verdict and res.verdict.winner == c.label:
            label = f"[bold green]{label} ★[/]"
        if c.crashed:
            first = c.attempts[0]
            what = "out of memory" if first.oom else f"exit {first.exit_code}"
            t.add_row(label, ok, f"[red]crashed ({what})[/]", *[""] * 9)
            continue
        tp = c.throughput
        t.add_row(
            label, ok, _band(tp),
            f"×{tp.median / base:.2f}" if tp and base else "–",
            _ms(c.median("step_p50_s")), _ms(c.median("step_p95_s")),
            _pct(c.median("data_wait_share"), 100), _pct(c.median("gpu_util_mean"), 1),
            _num(c.median("cpu_cores_busy"), ".2f"), human_bytes(c.median("peak_mem_bytes")),
            _num(c.median("energy_j_per_1k"), ",.0f"), _num(c.median("cost_per_1k"), ".4f"),
        )
    console.print(t)
    if any(c.throughput and c.throughput.assumed for c in res.configs):
        console.print("[dim]* band widened to the ±noise floor (one repeat, or repeats closer than the floor)[/]")
    for c in res.configs:
        for a in c.attempts:
            if not a.ok:
                console.print(f"[red]{escape(c.label)} (repeat {a.repeat}): {escape(a.error or 'failed')}[/] — "
                              f"run: {escape(a.run_dir)}")
                for line in a.stderr_tail[-6:]:
                    console.print(f"   [dim]{escape(line)}[/]")
    for k in res.knees:
        if not any(y for _, y in k["curve"]):
            continue
        console.print()
        console.print(f"[bold]throughput vs {escape(k['param'])}[/]" + (f" ({escape(k['group'])})" if k["group"] != "all" else ""))
        top = max((y for _, y in k["curve"] if y), default=None)
        for x, y in k["curve"]:
            mark = " ◀ knee" if k["knee"].value == x else ""
            console.print(f"  {x:>8g} {_bar(y, top):<{BAR}} {_num(y)}{mark}")
        console.print(f"  {escape(k['knee'].text)}")
    if res.verdict:
        console.print()
        style = "bold green" if res.verdict.significant else "yellow"
        console.print(f"[{style}]verdict:[/] {escape(res.verdict.text)}")
    if res.predictions:
        console.print()
        p = Table(title="prediction check", show_edge=False, pad_edge=False, title_justify="left")
        for col in ("finding", "predicted", "measured", "configuration", "verdict"):
            p.add_column(col)
        for pc in res.predictions:
            p.add_row(pc.cause, f"×{pc.predicted_speedup:.2f}",
                      f"×{pc.measured_speedup:.2f}" if pc.measured_speedup else "–",
                      escape(pc.measured_config or "–"), escape(pc.verdict))
        console.print(p)
        console.print(f"[dim]baseline: {escape(res.predictions[0].baseline)}[/]")
    if res.max_batch is not None:
        console.print()
        render_max_batch(res.max_batch, console)
    if res.caveats:
        console.print()
        console.print("[bold]before you keep a winner[/]")
        for caveat in res.caveats:
            console.print(f"  • {escape(caveat)}")


def _pct(x: float | None, scale: float) -> str:
    return "–" if x is None else f"{x * scale:.0f}%"


def render_max_batch(mb: MaxBatchResult, console: Console) -> None:
    console.print(f"[bold]largest batch that fits:[/] {escape(mb.text)}")
    for t in mb.tries:
        state = "[green]fits[/]" if t.fits else ("[red]out of memory[/]" if t.oom else "[red]failed[/]")
        extra = f", peak {human_bytes(t.peak_mem_bytes)}" if t.peak_mem_bytes else ""
        console.print(f"  batch {t.batch:>6}: {state} ({t.seconds:.1f} s{extra})"
                      + (f" [dim]{escape(t.detail[:120])}[/]" if t.detail and not t.fits else ""))


def _latency(ms: dict[str, float] | None, q: str) -> str:
    return "–" if ms is None else f"{ms[q]:.2f}"


def render_bench(res: BenchResult, console: Console) -> None:
    console.rule("[bold]gpusleuth bench[/]")
    budget = f"p95 budget {res.p95_budget_ms:g} ms" if res.p95_budget_ms is not None else "no p95 budget"
    limit = f"memory limit {human_bytes(res.mem_limit_bytes)}" if res.mem_limit_bytes else "no memory limit"
    console.print(f"target: [cyan]{escape(res.target)}[/] on {res.device} · {budget} · {limit}")
    t = Table(show_edge=False, pad_edge=False)
    for col in ("batch", "calls", "items/s", "p50", "p95", "p99", "peak mem", "util", "CPU ms/item", "stages (mean)", ""):
        t.add_column(col, justify="left" if col in ("stages (mean)", "") else "right")
    top = max((r.items_per_s or 0 for r in res.batches), default=0) or None
    for r in res.batches:
        if r.error:
            t.add_row(str(r.batch), str(r.calls), f"[red]{escape(r.error)}[/]", *[""] * 8)
            continue
        stages = " · ".join(f"{k[:4]} {v['mean']:.1f}" for k, v in r.stages_ms.items()) if r.stages_ms else ""
        mark = "◀ knee" if res.knee and res.knee.value == r.batch else ("" if r.admissible else escape(r.why_not))
        t.add_row(str(r.batch), str(r.calls), f"{r.items_per_s:,.1f} {_bar(r.items_per_s, top)}",
                  _latency(r.latency_ms, "p50"), _latency(r.latency_ms, "p95"), _latency(r.latency_ms, "p99"), human_bytes(r.peak_mem_bytes),
                  "–" if r.device_util_mean is None else f"{r.device_util_mean:.0f}%",
                  _num(r.cpu_ms_per_item, ".3f"), stages, mark)
    console.print(t)
    console.print("[dim]latencies in ms: service time of one batch (queueing under load comes on top)[/]")
    if res.knee:
        console.print(f"[bold]knee:[/] {escape(res.knee.text)}")
    for s in res.signs:
        console.print(f"[bold yellow]{s.kind}:[/] {escape(s.text)}")
        for e in s.evidence:
            console.print(f"   • {escape(e)}")
    for n in res.notes:
        console.print(f"[dim]{escape(n)}[/]")
