"""Experiment-tracker outputs of a report (``report RUN --mlflow URI`` / ``--wandb PROJECT``).

Each tracker gets a module; both log the same things, taken from the run's :class:`RunSummary`
(``report/summary.py``) and the Report: headline numbers and the badput split as metrics, what ran as
params, the top findings as tags, and the HTML report (plus the JSON) as artifacts. This module only
names and flattens those values — the numbers were computed by the report stage.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpusleuth.report.model import Report
    from gpusleuth.report.summary import RunSummary

TOP_FINDINGS = 5  # tags for the first N findings; the rest are in the attached report


def metrics(summary: RunSummary) -> dict[str, float]:
    """Scalar outcomes under stable names (``gpusleuth/…``), absent values left out."""
    s = summary
    out = {
        "goodput": s.goodput, "mfu": s.mfu, "samples_per_s": s.samples_per_s, "step_time_p50_s": s.step_time_p50_s,
        "wall_s": s.wall_s, "steps": s.steps, "gpu_hours": s.gpu_hours, "cost_usd": s.cost_usd,
        "energy_j": s.energy_j, "findings": s.findings, "top_gain_s": s.top_gain_s, "top_gain_usd": s.top_gain_usd,
    }
    out.update({f"badput_s.{k}": v for k, v in s.badput_s.items()})
    out.update({f"lost_usd.{k}": v for k, v in s.lost_usd.items()})
    return {f"gpusleuth/{k}": float(v) for k, v in out.items()
            if v is not None and isinstance(v, (int, float)) and math.isfinite(v)}


def params(summary: RunSummary) -> dict[str, str]:
    s = summary
    out = {"label": s.label, "command": s.command, "hostname": s.hostname, "gpus": s.gpus, "gpu_model": s.gpu_model,
           "price_per_gpu_hour": s.price_per_gpu_hour, "exit_code": s.exit_code}
    return {f"gpusleuth.{k}": str(v)[:500] for k, v in out.items() if v is not None}


def tags(report: Report) -> dict[str, str]:
    """The top findings, by estimated gain as the report ranks them: cause, severity and title each."""
    from gpusleuth._version import __version__

    out = {"gpusleuth.version": __version__}
    for i, f in enumerate(report.findings[:TOP_FINDINGS], 1):
        out[f"gpusleuth.finding.{i}.cause"] = f.cause
        out[f"gpusleuth.finding.{i}.severity"] = f.severity
        out[f"gpusleuth.finding.{i}.title"] = f.title[:500]
    if report.findings:
        out["gpusleuth.top_cause"] = report.findings[0].cause
    return out


@contextmanager
def report_files(report: Report) -> Iterator[list[Path]]:
    """The HTML and JSON reports written to a temporary folder, for uploading as artifacts."""
    from gpusleuth.render.html import render_html, write_page
    from gpusleuth.render.json_report import render_json

    with tempfile.TemporaryDirectory(prefix="gpusleuth-artifacts-") as tmp:
        html, js = Path(tmp) / "gpusleuth-report.html", Path(tmp) / "gpusleuth-report.json"
        write_page(render_html(report), html)
        js.write_text(render_json(report) + "\n")
        yield [html, js]


def as_json(d: dict[str, Any]) -> str:
    return json.dumps(d, sort_keys=True)
