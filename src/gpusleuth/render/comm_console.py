"""Terminal section for a distributed job's communication: per rank, time in collectives split into
waiting for the last rank and transfer, and who the others waited for. Formats ``report.comm``
(analysis.comm.CommSummary); computes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from gpusleuth.render.units import dollars

if TYPE_CHECKING:
    from gpusleuth.report.model import Report


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f} ms"


def render_comm(report: Report, console: Console) -> None:
    comm = report.comm
    if comm is None:
        return
    console.print()
    console.print(f"[bold]Communication across {len(comm.ranks)} ranks[/] [dim]({escape(comm.clock)}; "
                  "per-step medians)[/]")
    t = RichTable(box=None, padding=(0, 2))
    for col in ("rank", "host", "step", "in collectives", "waiting", "transfer", "data wait", "other",
                "arrived last"):
        t.add_column(col, justify="left" if col == "host" else "right")
    for r in comm.ranks:
        t.add_row(str(r.rank), escape(r.host or "–"), _ms(r.step_s), f"{_ms(r.comm_s)} ({r.comm_share:.0%})",
                  f"{_ms(r.wait_s)} ({r.wait_share:.0%})", _ms(r.transfer_s), _ms(r.data_wait_s), _ms(r.other_s),
                  "–" if r.last_share is None else f"{r.last_share:.0%}")
    console.print(t)
    unit = "GPU-h" if comm.hours_unit == "GPU-hours" else "process-h"
    cost = f"{comm.comm_gpu_hours:.4g} {unit} in collectives, {comm.wait_gpu_hours:.4g} {unit} of it waiting"
    if comm.comm_dollars is not None and comm.wait_dollars is not None:
        cost += f" ({dollars(comm.comm_dollars)} and {dollars(comm.wait_dollars)})"
    console.print(f"  {cost}")
    if report.outcomes is None:  # a trace-only report has no findings section: the cross-rank verdict here
        for f in report.findings:
            if f.cause == "straggler":
                console.print(f"  {f.severity.upper()} straggler — {escape(f.title)}")
