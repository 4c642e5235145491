"""The headline block of the terminal report: what the job delivered and what it cost."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from gpusleuth.render.phase_labels import TOOL_PHASES

if TYPE_CHECKING:
    from gpusleuth.analysis.headline import Headline

BADPUT_LABELS = {"startup": "start-up", "warmup": "warm-up/compile", "data_wait": "data wait",
                 "other_idle": "other idle", "lost_progress": "lost progress",
                 "stalled": "stalled (no progress)", **TOOL_PHASES}


def render_headline(h: Headline | None, console: Console) -> None:
    if h is None:
        return
    console.print()
    console.print("[bold]Headline[/]")
    s = h.steady
    parts = []
    if s.samples_per_s:
        parts.append(f"[bold]{s.samples_per_s:,.1f} samples/s[/]")
    if s.tokens_per_s:
        parts.append(f"[bold]{s.tokens_per_s:,.0f} tokens/s[/]")
    if s.step_time_p50_s and s.step_time_p95_s is not None:
        parts.append(f"steady step {s.step_time_p50_s * 1e3:.1f} ms p50 / {s.step_time_p95_s * 1e3:.1f} ms p95"
                     + (f", CV {s.step_time_cv:.2f}" if s.step_time_cv is not None else ""))
    if s.warmup_steps:
        parts.append(f"{s.warmup_steps} warm-up step(s) excluded")
    if parts:
        console.print("  throughput: " + " · ".join(parts))
    g = h.goodput
    bad = ", ".join(f"{BADPUT_LABELS.get(k, k)} {v:.0%}" for k, v in g.badput_share.items() if v >= 0.005)
    console.print(f"  goodput: [bold]{g.goodput:.0%}[/] of {g.wall_s:.1f} s wall" + (f" · badput: {escape(bad)}" if bad else ""))
    m = h.mfu
    if m.mfu is not None:
        extra = f", HFU {m.hfu:.1%}" if m.hfu is not None else ""
        console.print(f"  MFU: [bold]{m.mfu:.1%}[/]{extra} ({m.achieved_tflops:.1f} TFLOP/s per GPU) — "
                      f"[dim]{escape(m.convention)}; FLOPs {escape(m.flops_source or '')}[/]")
    else:
        console.print(f"  MFU: – [dim]({escape(m.why_not or '')})[/]")
    if m.sm_clock_ratio is not None:
        console.print(f"  SM clock: {m.sm_clock_ratio:.0%} of maximum on average")
    e = h.energy
    if e is not None:
        per = []
        if e.per_step_j is not None:
            per.append(f"{e.per_step_j:,.1f} J/step")
        if e.per_sample_j is not None:
            per.append(f"{e.per_sample_j:,.3f} J/sample")
        console.print(f"  energy: {e.run_j / 3.6e6:.4f} kWh over the run ({e.run_j:,.0f} J, "
                      f"{e.mean_power_w or 0:,.0f} W mean)" + (" · " + ", ".join(per) if per else ""))
    c = h.cost
    if c is not None:
        per = [f"${c.per_run:,.4f} per run"]
        if c.per_1k_samples is not None:
            per.append(f"${c.per_1k_samples:,.4f} per 1k samples")
        if c.per_epoch is not None:
            per.append(f"${c.per_epoch:,.2f} per epoch ({c.samples_per_epoch:,} samples)")
        per.append(f"${c.per_recoverable_second * 3600:,.2f} per hour saved")
        console.print(f"  cost: {' · '.join(per)} [dim](${c.price.per_gpu_hour:.2f}/GPU-h × {c.gpus}, "
                      f"{escape(c.price.source)})[/]")
    elif h.cost_note:
        console.print(f"  cost: – [dim]({escape(h.cost_note)})[/]")
    t = h.time_to_target
    if t is not None:
        if t.reached:
            console.print(f"  time to {escape(t.target)}: [bold]{t.time_to_target_s:,.1f} s[/] "
                          f"[dim](clock from {escape(t.clock_start)} to {escape(t.stop_event or '')}, "
                          f"evaluation on the clock, MLPerf rules; source {t.source})[/]")
        else:
            best = f"best {t.best:g}" if t.best is not None else "no values logged"
            console.print(f"  time to {escape(t.target)}: not reached ({best} over {t.evaluations} evaluations)")
    for note in h.notes:
        console.print(f"  [dim]{escape(note)}[/]")
