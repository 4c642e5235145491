"""``gpusleuth fleet``'s pass: a report for each run that has no ``summary.json`` yet (report/fleet.py
queries the summaries)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from gpusleuth.pipeline.build import build_report
from gpusleuth.report.summary import SUMMARY_FILE, summarize, write_summary
from gpusleuth.sources.rundir import load_run


def ensure_summaries(run_dirs: list[Path], progress: Callable[[int, int], None] | None = None) -> list[str]:
    """Make ``summary.json`` for runs that have none (a full report each); returns what could not be made."""
    missing = [d for d in run_dirs if not (d / SUMMARY_FILE).is_file()]
    problems: list[str] = []
    if not missing:
        return problems
    for i, d in enumerate(missing, 1):
        try:
            run = load_run(d)
            if not write_summary(d, summarize(build_report(run), run.meta)):
                problems.append(f"{d}: cannot write {SUMMARY_FILE} (read-only?); left out")
        except Exception as exc:  # noqa: BLE001 - one broken run must not hide the fleet
            problems.append(f"{d}: no report ({exc.__class__.__name__}: {str(exc)[:200]}); left out")
        if progress:
            progress(i, len(missing))
    return problems
