"""``gpusleuth fleet`` in the terminal, and as CSV/JSON rows. Formatting only: the Fleet is computed."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from gpusleuth.report.fleet import Fleet, FleetRow

CSV_COLUMNS = ["label", "path", "hostname", "start", "wall_s", "exit_code", "gpus", "gpu_model", "gpu_hours",
               "steps", "samples_per_s", "goodput", "mfu", "cost_usd", "lost_usd", "top_lost_cause", "findings",
               "top_finding", "top_cause", "top_severity", "top_gain_usd"]


def when(ns: int | None) -> str:
    return datetime.fromtimestamp(ns / 1e9, timezone.utc).strftime("%Y-%m-%d %H:%M") if ns else "–"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.0%}"


def _usd(v: float | None) -> str:
    return "–" if v is None else (f"${v:,.2f}" if abs(v) >= 0.01 or v == 0 else f"${v:.4f}")


def _plain(s: object) -> Text:
    """Labels and titles come from users' commands: shown as plain text, no markup, no control characters."""
    return Text("".join(ch if ch.isprintable() else "?" for ch in str(s or "–")))


def render_fleet_console(fleet: Fleet, console: Console) -> None:
    shown = len(fleet.rows)
    t = Table(title=f"gpusleuth fleet — {fleet.runs:,} run(s)" + (f", top {shown:,} shown" if shown < fleet.runs else ""),
              title_justify="left", header_style="bold")
    columns: tuple[tuple[str, JustifyMethod], ...] = (("run", "left"), ("started (UTC)", "left"), ("GPUs", "right"), ("GPU-h", "right"),
                          ("goodput", "right"), ("MFU", "right"), ("$ run", "right"), ("$ lost", "right"),
                          ("lost mostly to", "left"), ("top finding", "left"))
    for name, justify in columns:
        t.add_column(name, justify=justify, overflow="fold" if name == "top finding" else "ellipsis")
    for r in fleet.rows:
        t.add_row(_plain(r["label"]), when(r["start_ns"]), str(r["gpus"] or 0),
                  "–" if r["gpu_hours"] is None else f"{r['gpu_hours']:,.2f}", _pct(r["goodput"]), _pct(r["mfu"]),
                  _usd(r["cost_usd"]), _usd(r["lost_usd"]), _plain(r["top_lost_cause"]),
                  _plain(finding_text(r)))
    console.print(t)
    tot = fleet.totals
    if fleet.runs:
        console.print(f"total: {tot.get('gpu_hours') or 0:,.1f} GPU-hours · {_usd(tot.get('cost_usd'))} · "
                      f"lost {_usd(tot.get('lost_usd'))}", highlight=False)
    if fleet.lost_by_cause:
        console.print("lost by cause: " + " · ".join(f"{c} {_usd(v)}" for c, v in fleet.lost_by_cause.items()),
                      highlight=False)
    elif fleet.runs:
        console.print("no prices: give --price-per-gpu-hour to see dollars lost by cause", highlight=False)
    for s in fleet.skipped:
        console.print(_plain(f"skipped {s}"), style="dim")


def finding_text(r: FleetRow) -> str | None:
    if not r["top_finding"]:
        return None
    return (f"[{r['top_severity']}] " if r["top_severity"] else "") + str(r["top_finding"])


def _row(r: FleetRow) -> dict[str, Any]:
    out = {k: r.get(k) for k in CSV_COLUMNS if k != "start"}
    start = r["start_ns"]
    out["start"] = datetime.fromtimestamp(start / 1e9, timezone.utc).isoformat() if start else None
    return out


def render_fleet_csv(fleet: Fleet) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in fleet.rows:
        w.writerow(_row(r))
    return buf.getvalue()


def render_fleet_json(fleet: Fleet) -> str:
    rows = [{**_row(r), "lost_by_cause": r["lost_by_cause"]} for r in fleet.rows]
    return json.dumps({"schema": "gpusleuth.fleet/1", "runs": fleet.runs, "totals": fleet.totals,
                       "lost_by_cause": fleet.lost_by_cause, "rows": rows, "skipped": fleet.skipped}, indent=1)
