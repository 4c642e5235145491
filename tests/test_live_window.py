"""The live window's numbers are the report's for the same steps (issue 22: analysis once). The live view,
the Prometheus exporter and the trainer callbacks took each step's raw span and raw data wait; the report
carves phase time out of steps (``analysis/steps.carve``). On a real recording whose last 20 steps hold an
evaluation phase, the live view read a data-wait share of 0.939 and a step of 58.6 ms where the report's,
for the same steps, are 0.978 and 55.7 ms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpusleuth.analysis.outcomes import compute_outcomes
from gpusleuth.analysis.window import window_stats
from gpusleuth.report.live import LiveTail
from gpusleuth.run.layout import RunDir
from gpusleuth.sources.livetail import WINDOW_STEPS, EventsTail
from gpusleuth.sources.rundir import load_run

pytestmark = pytest.mark.unit

# `gpusleuth run --no-gpu -- python tests/jobs/phased_train.py --seconds 3`: 104 steps of a DataLoader that
# sleeps per sample, an `eval` phase after every 20th step (inside the next step's span)
RUN = Path(__file__).parent / "fixtures" / "rundir" / "phased"


def _report_for(steps: list[tuple[int, int, int, int]], pid: int):
    """The report's outcomes over exactly these steps of ``pid``: the recording with only them."""
    run = load_run(RUN)
    st = run.steps
    run.steps = st.filter((st["pid"] == pid) & (st["start_ns"] >= steps[0][0]) & (st["end_ns"] <= steps[-1][1]))
    assert len(run.steps) == len(steps)
    return compute_outcomes(run).steps


def test_the_live_view_reads_the_reports_numbers_for_its_window():
    live = LiveTail(RUN).poll()
    tail = EventsTail(RunDir(RUN).raw)
    tail.poll()
    pid = tail.main_pid()
    window = list(tail.steps[pid])
    assert len(window) == WINDOW_STEPS and live.steps == 104
    report = _report_for(window, pid)
    assert live.data_wait_share == pytest.approx(report.data_wait_share_of_steps, rel=1e-12)
    assert live.step_time_s == pytest.approx(report.step_time_p50_s, rel=1e-12)
    assert live.samples_per_s == pytest.approx(report.samples_per_s, rel=1e-12)
    # the carving is what made them differ: this window holds a phase, and raw spans read another share
    raw = sum(max(w, 0) for _, _, w, _ in window) / sum(e - b for b, e, _, _ in window)
    assert abs(raw - live.data_wait_share) > 0.03, (raw, live.data_wait_share)


def test_every_window_of_the_recording_agrees_with_the_report():
    """Each run of 20 consecutive steps, with the phases seen by the time its last step ended."""
    run = load_run(RUN)
    st = run.steps
    pid = int(np.unique(st["pid"])[0])
    order = np.argsort(st["start_ns"])
    steps = [tuple(int(st[c][i]) for c in ("start_ns", "end_ns", "data_wait_ns", "samples")) for i in order]
    phases = list(zip(run.phases["start_ns"].tolist(), run.phases["end_ns"].tolist()))
    for k in range(0, len(steps) - WINDOW_STEPS + 1, 7):
        window = steps[k:k + WINDOW_STEPS]
        seen = [p for p in phases if p[1] <= window[-1][1]]
        step_s, share, per_s = window_stats(window, seen)
        report = _report_for(window, pid)
        assert (step_s, share, per_s) == pytest.approx(
            (report.step_time_p50_s, report.data_wait_share_of_steps, report.samples_per_s), rel=1e-12), k
