"""``fleet --prometheus --csv``: one row per workload (pod, or GPU no pod held), the ledger's own columns."""

from __future__ import annotations

import csv
import io
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpusleuth.ledger.report import LedgerReport


def render_ledger_csv(report: LedgerReport) -> str:
    rows = report.rows()
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: _cell(v) for k, v in r.items()})
    return buf.getvalue()


def _cell(v: Any) -> Any:
    """A spreadsheet runs a cell starting with = + - @ as a formula: names from the cluster are quoted out."""
    if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + v
    return v
