"""``fleet --prometheus --json``: the ledger report's versioned JSON (schema gpusleuth.ledger/1)."""

from __future__ import annotations

import json
from typing import Any


def render_ledger_json(report: Any) -> str:
    return json.dumps(report.to_dict(), indent=1)
