"""``fleet --prometheus --json``: the ledger report's versioned JSON (schema gpusleuth.ledger/1)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpusleuth.ledger.report import LedgerReport


def render_ledger_json(report: LedgerReport) -> str:
    return json.dumps(report.to_dict(), indent=1)
