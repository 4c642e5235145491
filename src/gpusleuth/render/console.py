"""Terminal report, in the order a reader acts on it: the outcome headline, then the ranked findings (one
line each, with the gain), then the evidence (outcomes, GPU and host telemetry), each finding in detail in
the debugging order, the per-rank trace tables, and last one line per missing data source ("7 checks need
GPU telemetry — …"; every rule with ``verbose``). Formats what the Report holds; computes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from gpusleuth.render.text import SafeConsole
from rich.markup import escape
from rich.table import Table as RichTable
from rich.text import Text

from gpusleuth.render.comm_console import render_comm
from gpusleuth.serving.render.console import render_serving
from gpusleuth.report.model import Report
from gpusleuth.render.units import human_bytes
from gpusleuth.render.phase_labels import TOOL_PHASES

if TYPE_CHECKING:
    from gpusleuth.analysis.telemetry import Dist
    from gpusleuth.diagnosis.finding import Finding, Gain

SEVERITY_STYLE = {"high": "bold red", "moderate": "yellow", "none": "green"}
SHARE_LABELS = {"startup": "start-up (before first step)", "data_wait": "exposed data wait",
                "compute": "compute (rest of steps)", "other": "other (gaps, idle tail)",
                **TOOL_PHASES}


def _ms(s: float | None) -> str:
    return "–" if s is None else (f"{s * 1e3:.1f} ms" if s < 10 else f"{s:.2f} s")


def _pct(x: float | None, digits: int = 0) -> str:
    return "–" if x is None else f"{x:.{digits}f}%"




def _dist(d: Dist | None, unit: str = "%") -> str:
    if not d:
        return "–"
    return f"{d['mean']:.0f}{unit} (p5 {d['p5']:.0f}, p95 {d['p95']:.0f})"


def render_console(report: Report, console: Console | None = None, verbose: bool = False) -> None:
    console = console or SafeConsole(stderr=True, highlight=False)
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
    for node in r.nodes:
        ranks = ", ".join(map(str, node.get("ranks") or [])) or "?"
        console.print(f"  {escape(str(node.get('path')))}: rank(s) {ranks} · clock {escape(str(node.get('clock')))}")
    # a server loaded by `gpusleuth load` has no training steps: its outcomes are the serving section's
    steps = report.outcomes is not None and not (report.serving is not None and not report.outcomes.steps.steps)
    if steps and report.headline is not None:
        from gpusleuth.render.headline_console import render_headline

        render_headline(report.headline, console)
    _ranked(report, console)
    render_serving(report, console)
    if steps:
        _outcomes(report, console)
    if report.outcomes is not None or report.gpus:  # a GPU log read alone: its telemetry is the evidence
        _gpu(report, console)
        _host(report, console)
    _details(report, console)
    if report.comm is not None:
        render_comm(report, console)
    for rank in report.ranks:
        from gpusleuth.render.trace_console import render_trace

        render_trace(rank, console)
    _not_evaluated(report, console, verbose)
    if report.losses:
        console.print()
        console.print("[bold]Data losses and salvage[/]")
        for msg in report.losses:
            console.print(f"  • {escape(msg)}")


def _outcomes(report: Report, console: Console) -> None:
    o = report.outcomes
    if o is None:
        return
    s = o.steps
    console.print()
    console.print("[bold]Outcomes[/]")
    if not s.steps:
        console.print("  no training steps were seen (not a PyTorch training loop, or it never reached "
                      "optimizer.step()/backward(); mark steps with gpusleuth.step())")
    else:
        all_steps = " (all steps, warm-up included; the headline's are steady)" if report.headline else ""
        line = (f"  {s.steps} steps{all_steps} · step time p50 {_ms(s.step_time_p50_s)}, p95 {_ms(s.step_time_p95_s)}"
                + (f", CV {s.step_time_cv:.2f}" if s.step_time_cv is not None else ""))
        steady = report.headline.steady if report.headline else None
        if s.samples_per_s and not (steady and steady.samples_per_s):
            # with a headline its steady throughput is the one number: a second, over every step and one
            # process, read as a contradiction to first-time readers (issue 31)
            line += f" · {s.samples_per_s:,.0f} samples/s"
        console.print(line)
        if s.ranks and s.workers == "trainers":
            job = f", job {s.job_samples_per_s:,.0f} samples/s (sum over trainers)" if s.job_samples_per_s else ""
            console.print(f"  {len(s.ranks)} trainer processes without ranks{job}; the numbers above are "
                          f"pid {s.pid}'s")
        elif s.ranks:
            how = "sum over ranks" if s.model_parallel <= 1 else f"sum over ranks ÷ {s.model_parallel} sharing each batch"
            job = f", job {s.job_samples_per_s:,.0f} samples/s ({how})" if s.job_samples_per_s else ""
            console.print(f"  {len(s.ranks)} ranks (world size {s.world_size}){job}; the numbers above are "
                          f"rank {s.ranks[0].rank}'s")
        if s.ranks:
            t = RichTable(box=None, padding=(0, 2))
            for col in ("rank", "pid", "steps", "step p50 (steady)", "data wait", "samples/s"):
                t.add_column(col, justify="right")
            for r in s.ranks:
                t.add_row("–" if r.rank is None else str(r.rank), str(r.pid), str(r.steps), _ms(r.step_time_p50_s),
                          "–" if r.data_wait_share is None else f"{r.data_wait_share:.1%}",
                          "–" if r.samples_per_s is None else f"{r.samples_per_s:,.0f}")
            console.print(t)
    table = RichTable(box=None, show_header=False, pad_edge=False, padding=(0, 2))
    table.add_column(style="dim")
    table.add_column(justify="right")
    table.add_column(justify="right")
    table.add_column()
    for key, share in o.time_share.items():
        label = SHARE_LABELS.get(key, f"phase: {key}")
        bar = "█" * int(round(share * 30))
        if key == "data_wait" and o.steps.steps and o.steps.data_wait_measured_steps == 0:
            table.add_row("  " + escape(label), "unmeasured", "–", "")  # no fetch, no forward: not 0 %
            continue
        table.add_row("  " + escape(label), f"{o.time_s[key]:.2f} s", f"{share * 100:.1f}%", Text(bar, style="cyan"))
    console.print(f"  where the {o.wall_s:.2f} s of wall time went:")
    console.print(table)
    if o.after_training_s:
        parts = ", ".join(f"{escape(k)} {v:.2f} s" for k, v in o.after_training_s.items())
        console.print(f"  [dim](after training — phases after the last step, not the training loop: {parts})[/]")
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
    scope = report.gpu_scope
    if scope is not None and (scope.others or not scope.decided or len(scope.sampled) > 1):
        others = f"; not the job's (left out): {', '.join(map(str, scope.others))}" if scope.others else ""
        console.print(f"  [dim]the job's GPUs — {escape(scope.how)}{others}[/]")
    for g in report.gpus:
        for what, why in g.empty.items():
            console.print(f"  [dim]GPU {g.index} {what}: {escape(why)}[/]")
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
    if h.server_cores is not None:
        console.print(f"  server CPU {h.server_cores:.2f} cores over its {h.server_processes} process(es) while it "
                      "served" + (f" (its main process {h.main_cpu_pct_mean:.0f}% of a core)"
                                  if h.main_cpu_pct_mean is not None and (h.server_processes or 0) > 1 else ""))
    elif h.main_cpu_pct_mean is not None:
        role = "server process" if report.serving is not None or report.requests is not None else "training process"
        line = f"  {role} CPU {h.main_cpu_pct_mean:.0f}% of a core"
        if h.workers:
            line += f" · {h.workers} DataLoader worker(s) at {h.worker_cpu_pct_mean or 0:.0f}% of a core each (mean)"
        console.print(line)
    if h.foreign_cores_steps is not None and h.job_cores_steps is not None:
        console.print(f"  the job's processes {h.job_cores_steps:.2f} cores · everything else {h.foreign_cores_steps:.2f} cores"
                      + (" (while the steps ran)" if h.cpu_pct_steps else ""))


def _gain(g: Gain | None) -> str:
    if g is None or g.speedup == float("inf"):
        return ""
    money = f", ${g.dollars_per_run:,.2f}" if g.dollars_per_run is not None and g.dollars_per_run >= 0.005 else ""
    return f" · {g.speedup:.2f}× ({g.seconds_per_run:,.1f} s{money})"


def _ranked(report: Report, console: Console) -> None:
    console.print()
    console.print("[bold]Findings[/] (ranked by estimated gain; #N below is this rank)")
    if not report.findings:
        console.print("  none" + (" — no rule had the data it needs (see below)" if report.not_evaluated else ""))
    for i, f in enumerate(report.findings, 1):
        style = SEVERITY_STYLE.get(f.severity, "")
        console.print(f"  {i}. [{style}]{f.severity.upper()}[/] [bold]{escape(f.cause)}[/] — {escape(f.title)}"
                      f"{_gain(f.estimated_gain)}")


def _details(report: Report, console: Console) -> None:
    """Every finding in the product brief's debugging order (taxonomy.STAGES)."""
    from gpusleuth.diagnosis.taxonomy import STAGE_OF_CAUSE, STAGES

    number = {id(f): i for i, f in enumerate(report.findings, 1)}
    placed = set()
    for key, title in STAGES:
        found = [f for f in report.findings if STAGE_OF_CAUSE.get(f.cause) == key]
        if not found:
            continue
        console.print()
        console.print(f"[bold]{escape(title)}[/]")
        for f in found:
            _finding(number[id(f)], f, console)
            placed.add(id(f))
    rest = [f for f in report.findings if id(f) not in placed]
    if rest:
        console.print()
        for f in rest:
            _finding(number[id(f)], f, console)


def _not_evaluated(report: Report, console: Console, verbose: bool) -> None:
    if not report.not_evaluated and not report.not_applicable:
        return
    console.print()
    console.print("[bold]Not evaluated[/] (data missing)")
    if verbose:
        for m in report.not_evaluated:
            console.print(f"  • {escape(m.rule)}: needs {escape(m.needs)} — {escape(m.how)}")
    else:
        for g in report.missing_summary:
            n = len(g.rules)
            console.print(f"  • {n} check{'s' if n != 1 else ''} need{'' if n != 1 else 's'} {escape(g.data)} — "
                          f"{escape(g.how)} [dim]({escape(', '.join(g.rules))})[/]")
    if report.not_applicable:
        n = len(report.not_applicable)
        console.print(f"  [dim]• {n} training-loop check{'s' if n != 1 else ''} do{'' if n != 1 else 'es'} not apply: "
                      f"{escape(report.not_applicable_why)} ({escape(', '.join(m.rule for m in report.not_applicable))})[/]")


def _finding(i: int, f: Finding, console: Console) -> None:
    """One finding in full, under its debugging-order section: ``#i`` is its place in the ranked list above
    (a bare "1." under "5. Input pipeline" read as the section's first item, issue 27)."""
    style = SEVERITY_STYLE.get(f.severity, "")
    console.print(f"  #{i} [{style}]{f.severity.upper()}[/] [bold]{escape(f.cause)}[/] — {escape(f.title)}")
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
