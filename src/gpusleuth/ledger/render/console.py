"""``fleet --prometheus`` in the terminal: top offenders, namespaces, notes. Formatting only.

Fits a screen (120 columns): eight narrow columns (names are cut with an ellipsis, never wrapped), ``limit`` workloads
(top offenders first, as the ledger ordered them), then the namespaces and what was missing. Pod and
namespace names come from the cluster: printed as plain text, control characters shown as ``?``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpusleuth.render.fleet_console import _plain, _usd

if TYPE_CHECKING:
    from gpusleuth.ledger.report import LedgerReport


def _h(x: float | None) -> str:
    return "–" if x is None else f"{x:,.1f}"


def sizing_text(r: dict[str, Any]) -> str:
    if not r["sizing"]:
        return "–"
    saved = f" saves {_usd(r['sizing_saved_usd'])}" if r["sizing_saved_usd"] is not None else \
        f" saves {r['sizing_saved_h']:,.1f} GPU-h"
    return f"{r['sizing_target']}{saved}"


def render_ledger_console(report: LedgerReport, console: Console, limit: int = 20) -> None:
    d = report.to_dict()
    rows = d["workloads"]
    shown = rows[:limit] if limit else rows
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=f"gpusleuth fleet — {d['gpus']:,} GPU(s), {d['start']} → {d['end']}, {d['server']}"
              + (f" (top {len(shown)} of {len(rows)} workloads)" if len(shown) < len(rows) else ""),
              title_justify="left", header_style="bold")
    columns: list[tuple[str, Literal["left", "right"]]] = [
        ("workload", "left"), ("GPUs", "left"), ("GPU-h", "right"), ("idle h", "right"), ("low h", "right"),
        ("$ waste", "right"), ("reason", "left"), ("right-size", "left")]
    for name, justify in columns:
        t.add_column(name, justify=justify, overflow="ellipsis", no_wrap=True,
                     max_width={"workload": 32, "right-size": 26, "GPUs": 12}.get(name))
    for r in shown:
        gpus = f"{r['gpus']}×{r['card']}" if r["card"] else str(r["gpus"])
        alloc = r["allocated_h"] if r["pod"] else r["unallocated_h"]
        t.add_row(_plain(r["workload"]), _plain(gpus), _h(alloc), _h(r["allocated_idle_h"] if r["pod"] else None),
                  _h(r["low_activity_h"] if r["pod"] else None), _usd(r["wasted_usd"]), r["reason"],
                  _plain(sizing_text(r)))
    console.print(t)
    tot, usd = d["totals"]["hours"], d["totals"]["usd"]
    console.print(f"total: {sum(v or 0 for v in tot.values()):,.1f} GPU-hours · productive {_h(tot['productive'])} · "
                  f"low {_h(tot['low_activity'])} · allocated-idle {_h(tot['allocated_idle'])} "
                  f"({_usd(usd['allocated_idle'])}) · unallocated {_h(tot['unallocated'])} "
                  f"({_usd(usd['unallocated'])}) · no data {_h(tot['no_data'])}", highlight=False)
    if d["namespaces"]:
        nt = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="by namespace", title_justify="left", header_style="bold")
        for name in ("namespace", "pods", "GPUs", "alloc GPU-h", "idle h", "$ idle", "low h", "$ right-size saves"):
            nt.add_column(name, justify="left" if name == "namespace" else "right", no_wrap=True, overflow="ellipsis",
                          max_width=30 if name == "namespace" else None)
        for n in d["namespaces"][:limit or None]:
            h = n["hours"]
            alloc = (h["productive"] or 0) + (h["low_activity"] or 0) + (h["allocated_idle"] or 0)
            nt.add_row(_plain(n["namespace"] or "(none)"), str(n["pods"]), str(n["gpus"]), _h(alloc),
                       _h(h["allocated_idle"]), _usd(n["usd"]["allocated_idle"]), _h(h["low_activity"]),
                       _usd(n["sizing_savings_usd"]))
        console.print(nt)
    if d["models"]:
        mt = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="by served model (energy and dollars per output token)",
                   title_justify="left", header_style="bold")
        for name in ("model", "pods", "GPU-h", "kWh", "idle kWh", "output tokens", "J/token", "$/M tokens"):
            mt.add_column(name, justify="left" if name == "model" else "right", no_wrap=True, overflow="ellipsis",
                          max_width=36 if name == "model" else None)
        for m in d["models"][:limit or None]:
            mt.add_row(_plain(m["model"]), str(m["pods"]), _h(m["gpu_h"]), f"{m['energy_kwh']:,.2f}",
                       f"{m['idle_energy_kwh']:,.2f}", f"{m['tokens_out']:,.0f}",
                       "–" if m["j_per_token_out"] is None else f"{m['j_per_token_out']:,.3f}",
                       _usd(m["usd_per_mtok_out"]))
        console.print(mt)
        for m in d["models"][:limit or None]:
            if m["j_per_token_in"] is not None:
                console.print(_plain(f"prefill, {m['model']}: {m['j_per_token_in']:,.4g} J per input token, decode "
                                     f"{m['j_per_token_out_decode']:,.4g} J per output token (each its own energy "
                                     "above idle, fitted over the steps)"))
            elif m["prefill_note"]:
                console.print(_plain(f"per input token, {m['model']}: {m['prefill_note']}"), style="dim")
            if m["power_cap"]:
                console.print(_plain(f"power cap, {m['model']}: {m['power_cap']['text']}"))
    if d["power_cap_w"] is not None:  # workloads serving no model: their own what-if
        for r in [r for r in d["workloads"] if r["power_cap"] and not r["served_models"]][:limit or None]:
            console.print(_plain(f"power cap, {r['workload']}: {r['power_cap']['text']}"))
    cache = f" · {d['cache']}" if d["cache"] else ""
    console.print(f"prices: {d['price_source']}{cache} · {d['queries']} queries in {d['elapsed_s']:.1f} s",
                  style="dim", highlight=False)
    for line in d["found"]:
        console.print(Text("found: ") + _plain(line))
    for note in d["notes"]:
        console.print(Text("note: ") + _plain(note))
