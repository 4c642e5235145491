"""``--json``: the Report as one JSON object (schema in docs/report-json.md)."""

from __future__ import annotations

import json as _json

from gpusleuth.report.model import Report


def render_json(report: Report) -> str:
    return _json.dumps(report.to_dict(), indent=2, allow_nan=False)
