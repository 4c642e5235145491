"""``gpusleuth fleet``'s pass: a report for each run that has no summary yet (report/fleet.py queries the
summaries). Reading never writes a run: summaries made here are cached outside it (report/summary.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from gpusleuth.pipeline.build import build_report
from gpusleuth.report.fleet import summary_of
from gpusleuth.report.summary import cache_summary_outside, summarize
from gpusleuth.run.recording import RECORDING, recording_state
from gpusleuth.sources.rundir import load_run


def ensure_summaries(run_dirs: list[Path], progress: Callable[[int, int], None] | None = None
                     ) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Make a summary for each run that has none, in the run or in the cache (a full report each), and
    cache it outside the run; a run still being recorded is summarized afresh each time. Returns what could
    not be made, and the summaries made that no cache kept (for ``query_fleet``, by run directory)."""
    missing = [d for d in run_dirs if summary_of(d, {})[0] is None]
    problems: list[str] = []
    fresh: dict[str, dict[str, Any]] = {}
    for i, d in enumerate(missing, 1):
        try:
            run = load_run(d)
            summary = summarize(build_report(run), run.meta)
            if recording_state(d, run.meta.get("end_ns")) == RECORDING or not cache_summary_outside(d, summary):
                fresh[str(d)] = summary.to_dict()
        except Exception as exc:  # noqa: BLE001 - one broken run must not hide the fleet
            problems.append(f"{d}: no report ({exc.__class__.__name__}: {str(exc)[:200]}); left out")
        if progress:
            progress(i, len(missing))
    return problems, fresh
