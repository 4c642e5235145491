"""Terminal rendering of one rank's trace analysis (formatting only — every number comes from the
:class:`~gpusleuth.analysis.trace.TraceAnalysis`; nothing is computed here beyond unit conversion).

Trace-derived strings (kernel names, file names) go through ``rich.markup.escape`` so a name with
square brackets cannot inject console markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table
from gpusleuth.render.labels import category_labels, cpu_only_note

if TYPE_CHECKING:
    from gpusleuth.analysis.trace import StepPartition, TraceAnalysis


def _ms(s: float | None) -> str:
    return "—" if s is None else f"{s * 1e3:,.2f}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:.1f}%"


def _us(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f}"


def render_trace(d: TraceAnalysis, console: Console) -> None:
    rank = "?" if d.rank is None else d.rank
    console.rule(f"[bold]Trace · rank {rank}[/] · {escape(d.label)}"
                 + (f" · {escape(d.device)}" if d.device else ""))
    labels = category_labels(d.cpu_only)
    if d.cpu_only:
        console.print(cpu_only_note(None))
    else:
        console.print(f"Device span {_ms(d.device_span_s)} ms: compute {_pct(d.compute)}, "
                      f"non-compute {_pct(d.non_compute)}, idle {_pct(d.idle)} "
                      "[dim](HTA-comparable temporal breakdown)[/]")
    _partition(d, console, labels)
    _idle(d, console, labels)
    _kernels(d, console)
    _launch(d, console)
    _overlap_steps(d, console)
    for title, items, style in (("Data issues", d.issues, "yellow"), ("Losses", d.losses, "red")):
        if items:
            console.print(f"[bold {style}]{title}[/]")
            for s in items:
                console.print(f"  • {escape(s)}")


def _partition(d: TraceAnalysis, console: Console, labels: dict[str, str]) -> None:
    steps = d.steps
    if len(steps) > 8:
        _partition_long(steps, console, labels, d.cpu_only)
    elif steps:
        cats = [c for c in labels if any(c in s.partition for s in steps)]
        t = Table(title=("Host time" if d.cpu_only else "Exposed time")
                  + " per step (ms; each row sums to the step time)", show_lines=False)
        t.add_column("category")
        for s in steps:
            t.add_column(f"#{s.step}", justify="right")
        t.add_row("[bold]step time[/]", *[f"[bold]{_ms(s.duration_s)}[/]" for s in steps])
        for c in cats:
            t.add_row(labels[c], *[_ms(s.partition.get(c, 0.0)) for s in steps])
        if not d.cpu_only:
            t.add_row("[dim]comm hidden under compute[/]", *[_ms(s.comm_overlapped_s) for s in steps])
        console.print(t)
    else:
        part = d.trace_partition
        t = Table(title=f"Exposed time over the whole trace ({_ms(d.trace_window_s)} ms; no ProfilerStep)")
        t.add_column("category")
        t.add_column("ms", justify="right")
        t.add_column("share", justify="right")
        tot = d.trace_window_s
        for c in labels:
            if c in part:
                t.add_row(labels[c], _ms(part[c]), _pct(part[c] / tot if tot else None))
        console.print(t)


_SHORT = {"compute": "compute", "comm": "comm", "memset": "memset", "idle_dependency": "idle dep",
          "idle_kernel_gap": "idle gap", "idle_sync": "idle sync", "idle_data_loader": "idle data",
          "idle_optimizer_cpu": "idle optim", "idle_launch": "idle launch", "idle_host": "idle host",
          "idle_other": "idle other"}
_SHORT_CPU = {"idle_host": "CPU ops", "idle_other": "between ops", "idle_data_loader": "data",
              "idle_optimizer_cpu": "optim", "idle_sync": "sync", "idle_launch": "launch"}


def _partition_long(steps: list[StepPartition], console: Console, labels: dict[str, str], cpu_only: bool) -> None:
    """Many steps: one row per step, one column per category present (copies grouped by name prefix)."""
    cats = [c for c in labels if any(c in s.partition for s in steps)]
    short = {**_SHORT, **(_SHORT_CPU if cpu_only else {})}
    t = Table(title="Exposed time per step (ms; each row sums to the step time)")
    t.add_column("step", justify="right")
    t.add_column("time", justify="right")
    for c in cats:
        t.add_column(short.get(c, c.replace("memcpy_", "").replace("_", " ")), justify="right")
    for s in steps:
        t.add_row(f"#{s.step}", _ms(s.duration_s), *[_ms(s.partition.get(c, 0.0)) for c in cats])
    console.print(t)
    if cpu_only:
        console.print("[dim]CPU ops = inside ops (the computation); between ops = Python and framework code[/]")
        return
    console.print("[dim]idle dep = waiting on a dependency with work queued; idle gap = gaps between queued "
                  "kernels; idle host = host-bound Python/framework; idle other = no host activity recorded[/]")


def _idle(d: TraceAnalysis, console: Console, labels: dict[str, str]) -> None:
    ic = d.idle_causes
    if not ic.total_s:
        return
    if d.cpu_only:
        return  # no device to be idle: the per-step table already says where the host's time went
    t = Table(title=f"Idle causes (over the {'steps' if ic.over == 'steps' else 'device span'}, "
                    f"{_ms(ic.total_s)} ms idle)")
    t.add_column("cause")
    t.add_column("ms", justify="right")
    t.add_column("share of idle", justify="right")
    for c, v in sorted(ic.seconds.items(), key=lambda kv: -kv[1]):
        if v > 0:
            t.add_row(labels.get(c, c), _ms(v), _pct(ic.share[c]))
    console.print(t)


def _kernels(d: TraceAnalysis, console: Console) -> None:
    k = d.kernels
    if not k.kernels:
        return
    t = Table(title=f"Top kernels ({k.kernels:,} kernels, {k.distinct_names:,} names, "
                    f"{_ms(k.kernel_time_s)} ms)")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("kernel", "left"), ("family", "left"), ("count", "right"), ("total ms", "right"), ("share", "right"),
        ("mean µs", "right"), ("median µs", "right"))
    for col, j in columns:
        t.add_column(col, justify=j, overflow="ellipsis", no_wrap=True, max_width=60 if col == "kernel" else None)
    for r in k.top:
        t.add_row(escape(r.name), r.family, f"{r.count:,}", _ms(r.total_s), _pct(r.share),
                  _us(r.mean_us), _us(r.median_us))
    console.print(t)
    fam = vars(k.families)
    sk = k.short_kernels
    parts = [f"{name} {_pct(v.share)}" for name, v in fam.items() if v.count]
    console.print(f"Kernel families by time: {', '.join(parts) or 'none recognised'}"
                  + ("" if sk is None else f"; short kernels (<{sk.threshold_us:g} µs): {_pct(sk.count_share)} of "
                     f"kernels, {_pct(sk.time_share)} of kernel time"))
    if k.precision_share_of_gemm:
        prec = ", ".join(f"{p} {_pct(v)}" for p, v in k.precision_share_of_gemm.items())
        console.print(f"GEMM/conv precision by time: {prec}; tensor-core kernels {_pct(k.tensor_core_share)} "
                      "of kernel time")


def _launch(d: TraceAnalysis, console: Console) -> None:
    L = d.launch
    if not L.launches:
        return
    console.print(
        f"Launches: {L.launches:,}; launch call median {_us(L.launch_cost_us.median)} µs; "
        f"launch latency (empty queue) median {_us(L.launch_latency_us.median)} µs over "
        f"{L.launch_latency_us.count:,}; queueing delay median {_us(L.queueing_delay_us.median)} µs "
        f"over {L.queueing_delay_us.count:,}; max queue depth {L.max_queue_depth:,}"
        + (f"; queue saturated (≥{L.saturation_depth}) for {_ms(L.saturated_s)} ms — the CPU blocks "
           "in launches" if L.saturated_s else "")
        + f"; {_pct(L.ops_shorter_than_launch.share)} of ops run shorter than their launch call")


def _overlap_steps(d: TraceAnalysis, console: Console) -> None:
    ov = d.overlap
    if ov.comm_s:
        console.print(f"Communication {_ms(ov.comm_s)} ms: {_pct(ov.overlap_ratio)} overlapped with compute, "
                      f"{_ms(ov.exposed_s)} ms exposed")
    st = d.step_stats
    if st.count:
        out = ", ".join(f"#{o.step}" + ("" if o.vs_median is None else f" ({o.vs_median:.2f}× median)")
                        for o in st.outliers)
        console.print(f"Steps: {st.count}, median {_ms(st.median_s)} ms, CV {_pct(st.cv)}"
                      + (f"; outliers: {out}" if out else ""))
