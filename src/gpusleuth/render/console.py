"""Terminal report. Leads with outcomes (steps, step time, throughput, where the wall time went), then
GPU and host telemetry, then ranked findings. Formats what the Report holds; computes nothing."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable
from rich.text import Text

from gpusleuth.render.comm_console import render_comm
from gpusleuth.report.model import Report
from gpusleuth.render.units import human_bytes

SEVERITY_STYLE = {"high": "bold red", "moderate": "yellow", "none": "green"}
SHARE_LABELS = {"startup": "start-up (before first step)", "data_wait": "exposed data wait",
                "compute": "compute (rest of steps)", "other": "other (gaps, idle tail)",
                "gpusleuth_profiler": "gpusleuth profiler (trace export)"}


def _ms(s: float | None) -> str:
    return "–" if s is None else (f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.2f} s")


def _pct(x: float | None, digits: int = 0) -> str:
    return "–" if x is None else f"{x:.{digits}f}%"




def _dist(d: dict | None, unit: str = "%") -> str:
    if not d:
        return "–"
    return f"{d['mean']:.0f}{unit} (p5 {d['p5']:.0f}, p95 {d['p95']:.0f})"


def render_console(report: Report, console: Console | None = None) -> None:
    console = console or Console(stderr=True, highlight=False)
    r = report.run
    console.rule(f"[bold]gpusleuth report[/] — {escape(r.label)}")
    if r.command:
        console.print(f"command: [cyan]{escape(' '.join(r.command))}[/]")
    ending = []
    if r.exit_code is not None:
        ending.append(f"exit code {r.exit_code}" + (f" ({r.signal})" if r.signal else ""))
    if r.wall_s is not None:
        ending.append(f"wall {r.wall_s:.2f} s")
    if r.stopped_by:
        ending.append(f"stopped by {escape(r.stopped_by)}")
    if ending:
        console.print(" · ".join(ending))
    if report.outcomes is not None:
        from gpusleuth.render.headline_console import render_headline

        render_headline(report.headline, console)
        _outcomes(report, console)
        _gpu(report, console)
        _host(report, console)
        render_comm(report, console)
        _findings(report, console)
    for rank in report.ranks:
        from gpusleuth.render.trace_console import render_trace

        render_trace(rank, console)
    if report.outcomes is None:
        render_comm(report, console)
    if report.losses:
        console.print()
        console.print("[bold]Data losses and salvage[/]")
        for msg in report.losses:
            console.print(f"  • {escape(msg)}")


def _outcomes(report: Report, console: Console) -> None:
    o = report.outcomes
    s = o.steps
    console.print()
    console.print("[bold]Outcomes[/]")
    if not s.steps:
        console.print("  no training steps were seen (not a PyTorch training loop, or it never reached "
                      "optimizer.step()/backward(); mark steps with gpusleuth.step())")
    else:
        line = (f"  {s.steps} steps · step time p50 {_ms(s.step_time_p50_s)}, p95 {_ms(s.step_time_p95_s)}"
                + (f", CV {s.step_time_cv:.2f}" if s.step_time_cv is not None else ""))
        if s.samples_per_s:
            line += f" · {s.samples_per_s:,.0f} samples/s"
        console.print(line)
    table = RichTable(box=None, show_header=False, pad_edge=False, padding=(0, 2))
    table.add_column(style="dim")
    table.add_column(justify="right")
    table.add_column(justify="right")
    table.add_column()
    for key, share in o.time_share.items():
        label = SHARE_LABELS.get(key, f"phase: {key}")
        bar = "█" * int(round(share * 30))
        table.add_row("  " + escape(label), f"{o.time_s[key]:.2f} s", f"{share * 100:.1f}%", Text(bar, style="cyan"))
    console.print(f"  where the {o.wall_s:.2f} s of wall time went:")
    console.print(table)
    if o.tail_s > 0.05:
        console.print(f"  [dim](idle tail after the last step: {o.tail_s:.2f} s)[/]")


def _gpu(report: Report, console: Console) -> None:
    console.print()
    console.print("[bold]GPU[/]")
    if not report.gpus:
        console.print(f"  {escape(report.gpu_note or 'no GPU telemetry')} — host telemetry only")
        return
    t = RichTable(box=None, padding=(0, 2))
    for col in ("GPU", "util (mean, p5, p95)", "mem util", "peak memory", "power", "energy", "SM clock", "throttled"):
        t.add_column(col)
    for g in report.gpus:
        mem = f"{human_bytes(g.mem_used_max_bytes)} / {human_bytes(g.mem_total_bytes)}"
        clock = "–"
        if g.sm_clock_mhz:
            clock = f"{g.sm_clock_mhz['mean']:.0f} MHz" + (f" of {g.max_sm_clock_mhz:.0f}" if g.max_sm_clock_mhz else "")
        thr = ", ".join(f"{k} {v:.0%}" for k, v in g.throttled_share.items()) or "no"
        t.add_row(f"{g.index} {escape(g.name or '')}", _dist(g.util_gpu), _dist(g.util_mem), mem,
                  _dist(g.power_w, " W"), "–" if g.energy_j is None else f"{g.energy_j:,.0f} J", clock, thr)
    console.print(t)
    for g in report.gpus:
        if g.sm_active or g.tensor_active:
            console.print(f"  GPU {g.index} real activity: SM active {_dist(g.sm_active)}, "
                          f"occupancy {_dist(g.sm_occupancy)}, tensor {_dist(g.tensor_active)}, "
                          f"DRAM {_dist(g.dram_active)}")


def _host(report: Report, console: Console) -> None:
    h = report.host
    if h is None:
        return
    console.print()
    console.print("[bold]Host[/]")
    console.print(f"  CPU {_dist(h.cpu_pct)} of {h.logical_cores or '?'} cores · iowait {_dist(h.iowait_pct)}"
                  + (f" · cgroup throttled {h.cgroup_throttled_share:.0%} of periods" if h.cgroup_throttled_share else ""))
    if h.main_cpu_pct_mean is not None:
        line = f"  training process CPU {h.main_cpu_pct_mean:.0f}% of a core"
        if h.workers:
            line += f" · {h.workers} DataLoader worker(s) at {h.worker_cpu_pct_mean or 0:.0f}% of a core each (mean)"
        console.print(line)


def _findings(report: Report, console: Console) -> None:
    """Ranked summary first (one line each), then every finding in the product brief's debugging order
    (taxonomy.STAGES), each stage listing what could not be evaluated and what to run for it."""
    from gpusleuth.diagnosis.taxonomy import STAGE_OF_CAUSE, STAGES

    console.print()
    console.print("[bold]Findings[/] (ranked by estimated gain)")
    if not report.findings:
        console.print("  none")
    number = {}
    for i, f in enumerate(report.findings, 1):
        number[id(f)] = i
        style = SEVERITY_STYLE.get(f.severity, "")
        g = f.estimated_gain
        gain = f" · {g.speedup:.2f}× predicted" if g is not None and g.speedup != float("inf") else ""
        console.print(f"  {i}. [{style}]{f.severity.upper()}[/] [bold]{escape(f.cause)}[/] — {escape(f.title)}{gain}")
    for key, title in STAGES:
        found = [f for f in report.findings if STAGE_OF_CAUSE.get(f.cause) == key]
        missing = [m for m in report.not_evaluated if STAGE_OF_CAUSE.get(m.cause or "") == key]
        if not found and not missing:
            continue
        console.print()
        console.print(f"[bold]{escape(title)}[/]")
        for f in found:
            _finding(number[id(f)], f, console)
        for m in missing:
            console.print(f"  [dim]not evaluated: {escape(m.rule)} — needs {escape(m.needs)}; {escape(m.how)}[/]")
    other = [m for m in report.not_evaluated if STAGE_OF_CAUSE.get(m.cause or "") is None]
    if other:
        console.print()
        console.print("[bold]Not evaluated[/] (data missing)")
        for m in other:
            console.print(f"  • {escape(m.rule)}: needs {escape(m.needs)} — {escape(m.how)}")


def _finding(i: int, f, console: Console) -> None:
    style = SEVERITY_STYLE.get(f.severity, "")
    console.print(f"  {i}. [{style}]{f.severity.upper()}[/] [bold]{escape(f.cause)}[/] — {escape(f.title)}")
    console.print(f"     {escape(f.summary)}")
    for e in f.evidence:
        src = f" [dim]({escape(e.source)})[/]" if e.source else ""
        console.print(f"     · {escape(e.name)}: {escape(str(e.value))} {escape(e.unit)}{src}")
    g = f.estimated_gain
    if g is not None:
        console.print(f"     estimated gain: {g.step_share:.0%} of step time, {g.seconds_per_run:.1f} s "
                      f"per run ({g.speedup:.2f}× throughput) — {escape(g.method)}")
    console.print(f"     fix: {escape(f.fix)}".replace("\n", "\n          "))
    console.print(f"     confidence: {f.confidence}")
