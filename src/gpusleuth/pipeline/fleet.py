"""``gpusleuth fleet``'s pass: each run's summary (its own ``summary.json`` or a cached one, read through
``sources/summaries.py``), and for each run that has none yet, a full report read through the one door
(``sources/inputs.read_inputs``). Reading never writes a run: summaries made here are cached outside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from gpusleuth.pipeline.build import build_report
from gpusleuth.report.summary import summarize
from gpusleuth.run.layout import SUMMARY_FILE
from gpusleuth.run.recording import RECORDING, recording_state
from gpusleuth.sources.inputs import read_inputs
from gpusleuth.sources.summaries import cache_summary_outside, read_summary


def fleet_summaries(run_dirs: list[Path], analyse: bool = True,
                    progress: Callable[[int, int], None] | None = None
                    ) -> tuple[list[tuple[Path, dict[str, Any]]], list[str]]:
    """``(run directory, summary record)`` for every run that has or gets one, and one line per run left out
    and why. A run without a summary (in the run or in the cache) gets one made from a full report when
    ``analyse`` (cached outside the run, except for a run still being recorded: summarized afresh each time)."""
    have: dict[Path, dict[str, Any]] = {}
    missing: list[Path] = []
    unreadable: list[str] = []
    for d in run_dirs:
        rec, problem = read_summary(d)
        if problem:
            unreadable.append(problem)
        elif rec is None:
            missing.append(d)
        else:
            have[d] = rec
    problems: list[str] = []
    if not analyse:
        problems = [f"{d}: no {SUMMARY_FILE} and none cached (--no-analyse)" for d in missing]
        missing = []
    for i, d in enumerate(missing, 1):
        try:
            run = read_inputs([d]).job  # the one door, as `report` reads it
            summary = summarize(build_report(run), run.meta).to_dict()
            if recording_state(d, run.meta.get("end_ns")) != RECORDING:
                cache_summary_outside(d, summary)
            have[d] = summary
        except Exception as exc:  # noqa: BLE001 - one broken run must not hide the fleet
            problems.append(f"{d}: no report ({exc.__class__.__name__}: {str(exc)[:200]}); left out")
        if progress:
            progress(i, len(missing))
    return [(d, have[d]) for d in run_dirs if d in have], problems + unreadable
