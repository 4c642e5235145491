"""``compare --json``: the comparison as one JSON object (``gpusleuth.compare/1``, docs/report-json.md)."""

from __future__ import annotations

import json

from gpusleuth.report.comparison import ComparisonReport
from gpusleuth.report.model import _clean


def render_compare_json(cr: ComparisonReport) -> str:
    return json.dumps(_clean(cr.to_dict()), indent=2, allow_nan=False)
