"""``fleet --prometheus --grafana-summary FILE``: the ledger as a few low-cardinality gauges for Grafana.

Prometheus text exposition for node_exporter's textfile collector (or any file-based scrape): GPU-hours
and dollars by namespace × class, never one series per pod or job (per-job labels are what blows up a
server's cardinality). Label values come from the cluster and are escaped as the format requires.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpusleuth.ledger.report import LedgerReport


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_ledger_grafana(report: LedgerReport) -> str:
    d = report.to_dict()
    out = ["# HELP gpusleuth_fleet_gpu_hours GPU-hours in the ledger window by namespace and class "
           "(productive, low_activity, allocated_idle, unallocated, no_data).",
           "# TYPE gpusleuth_fleet_gpu_hours gauge"]
    for s in d["summary_by_reason"]:
        out.append(f'gpusleuth_fleet_gpu_hours{{namespace="{_esc(s["namespace"])}",class="{s["class"]}"}} '
                   f'{s["gpu_hours"]}')
    out += ["# HELP gpusleuth_fleet_usd US dollars in the ledger window by namespace and class.",
            "# TYPE gpusleuth_fleet_usd gauge"]
    for s in d["summary_by_reason"]:
        if s["usd"] is not None:
            out.append(f'gpusleuth_fleet_usd{{namespace="{_esc(s["namespace"])}",class="{s["class"]}"}} {s["usd"]}')
    out += ["# HELP gpusleuth_fleet_window_seconds Length of the ledger window.",
            "# TYPE gpusleuth_fleet_window_seconds gauge"]
    out.append(f"gpusleuth_fleet_window_seconds {d['window_s']}")
    return "\n".join(out) + "\n"
