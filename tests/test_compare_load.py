"""`compare` of one configuration recorded under different host load (issue 27, defect 6).

The same job measured 30 minutes apart on a shared host was "+56 %, beyond noise" against a ±15 % floor:
the runs differed by other processes' CPU use, not by anything in the job. Real recordings here: the demo's
single-process job twice, the second beside real CPU burners on 1.5 of the host's cores. The comparison
must name the load difference and hold its verdict inside what that load alone explains."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from conftest import gpusleuth
from test_demo_verdict import _burners, _stop

pytest.importorskip("torch")

JOB = [sys.executable, "-m", "gpusleuth.demo.job", "--planted", "--steps", "30", "--transform-rounds", "4"]


def _record(out) -> None:
    res = gpusleuth("run", "--no-gpu", "--no-report", "--out", str(out), "--", *JOB, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]


@pytest.mark.slow
def test_same_job_under_other_host_load_is_not_beyond_noise(tmp_path):
    _record(tmp_path / "a")
    # more burners than cores: on an idle host 1.5 cores of burners left a single-threaded job 93 % of its
    # ready time (the scheduler gave it the free half core), too little difference for the test's premise
    burners = _burners(1.5 * (os.cpu_count() or 2))
    try:
        time.sleep(0.5)
        _record(tmp_path / "b")
    finally:
        _stop(burners)
    res = gpusleuth("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json")
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    a, b = d["runs"]
    assert b["cpu_attained"] < 0.85 * a["cpu_attained"], (a, b)  # the burners took CPU from the job
    note = d["noise_notes"][1]
    assert "different host load" in note, note  # named, with the cores others took
    delta, band = d["deltas"][1]["throughput"], d["noise_band"][1]
    assert d["beyond_noise"][1]["throughput"] == (abs(delta) > band)
    # the band holds what the load alone explains: the loop got a CPU for less of its ready time
    assert band >= a["cpu_attained"] / b["cpu_attained"] - 1 - 1e-9 and not d["beyond_noise"][1]["throughput"], \
        (delta, band, note)
