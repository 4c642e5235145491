"""Cadence advice needs a cadence (issue 27, defect 2).

minGPT's chargpt samples and saves at iteration 0 and then every 500; a 200-iteration run was told
"Evaluation runs every 2 steps; evaluate 4× less often (e.g. every 8 steps)" from that one occurrence.
A phase's interval is stated from three occurrences on (analysis/loop.MIN_CADENCE: two intervals a median
can read); below that the finding says what was seen and gives no "less often" advice or gain."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO
from gpusleuth.pipeline.build import build_report
from gpusleuth.sources.rundir import load_run

pytest.importorskip("torch")


def _record(tmp_path, *args):
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "run", "--no-gpu", "--no-report", "--out", str(out),
                          "--", sys.executable, str(REPO / "tests" / "jobs" / "sample_every_500.py"), *args],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    return build_report(load_run(out))


@pytest.mark.slow
def test_one_sample_at_iteration_zero_gets_no_cadence_advice(tmp_path):
    report = _record(tmp_path, "--iters", "40")
    evals = [f for f in report.findings if f.cause == "phase.eval"]
    for f in evals:  # the sampling at iteration 0 may or may not reach 5 % of the loop on this host
        assert "runs every" not in f.fix and "less often (e.g." not in f.fix, f.fix
        assert "ran once, at step 1" in f.fix and f.estimated_gain is None
        assert {e.name: e.value for e in f.evidence}["occurrences"] == 1
    assert evals, [f.title for f in report.findings]


@pytest.mark.slow
def test_a_real_cadence_is_still_read(tmp_path):
    """The same job sampling every 10 iterations: its interval is read and the advice follows it."""
    report = _record(tmp_path, "--iters", "40", "--sample-every", "10", "--sample-len", "60")
    (f,) = [f for f in report.findings if f.cause == "phase.eval"] or [None]
    assert f is not None and "every 10 steps" in f.fix and f.estimated_gain is not None
