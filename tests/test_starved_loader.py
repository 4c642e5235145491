"""A loader starved of CPU by other processes' load is CPU work, not storage — on any host.

On a busy host the demo's planted loader (a CPU transform in the training thread) got a CPU for only 16 % of
its wait, which the input rule read as storage latency (`input.io`), and starved workers looked idle the same
way. The threads' schedstat clocks say what a state sample and a CPU share cannot: how long each was runnable
*waiting for* a CPU. Real runs recorded beside real CPU burners (tests/fixtures/starved_runs/README.md); the
io case must stay io under the same burners, since a thread sleeping on storage wants no CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusleuth.pipeline.build import build_report
from gpusleuth.sources.rundir import load_run

pytestmark = pytest.mark.unit

RUNS = Path(__file__).resolve().parent / "fixtures" / "starved_runs"


def _input(name: str):
    report = build_report(load_run(RUNS / name))
    (f,) = [f for f in report.findings if f.cause.startswith("input.")]
    return f, {e.name: e.value for e in f.evidence}, report


def test_a_training_thread_starved_while_loading_is_preprocessing_not_storage():
    f, ev, report = _input("demo_planted_burners")
    assert ev["main-thread CPU while waiting"] < 30  # what it got: below the line that reads "storage"
    assert f.cause == "input.preprocessing", f.cause
    assert ev["main thread wanting a CPU during the wait (at least)"] >= 90  # what it wanted
    assert f.severity == "moderate"  # others' load: named, never a HIGH on this job
    assert "starved" in f.summary and "uncertain" not in f.summary
    assert any(g.cause == "contention" for g in report.findings)


def test_starved_loader_workers_are_preprocessing():
    f, ev, _ = _input("demo_fixed_burners")
    assert ev["loader worker CPU (mean)"] < 50  # they looked idle
    assert f.cause == "input.preprocessing", f.cause
    assert ev["loader workers wanting a CPU (running or runnable)"] >= 50


def test_a_thread_sleeping_on_storage_stays_io_beside_the_same_burners():
    f, ev, report = _input("storage_burners")
    assert f.cause == "input.io", f.cause
    assert "main thread wanting a CPU during the wait (at least)" not in ev
    host = report.host
    assert host is not None and host.main_cpu_demand is not None and host.main_cpu_demand < 0.75  # the starved demo wanted ≥ 0.99


@pytest.mark.parametrize("name", ["demo_planted_burners", "demo_fixed_burners", "storage_burners"])
def test_the_loops_share_of_its_ready_time_on_a_cpu_agrees_with_the_sampled_estimate(name):
    """``compare``'s load band reads how much of its ready time the training loop got a CPU. It now comes from
    the main thread's schedstat clocks (ran ÷ (ran + waited), exact); the 10 Hz state samples (process CPU ÷ the
    share of samples in state R) are an independent estimate of the same thing, and agree on these runs beside
    burners: 0.17, 0.13 and 0.63 against 0.18, 0.13 and 0.61."""
    h = build_report(load_run(RUNS / name)).host
    assert h is not None and h.main_cpu_demand is not None and h.main_runnable_share
    sampled = min(h.main_cpu_pct_mean / 100 / h.main_runnable_share, 1.0)
    assert h.main_cpu_attained == pytest.approx((h.main_cpu_demand - h.main_run_delay_share) / h.main_cpu_demand)
    assert abs(h.main_cpu_attained - sampled) < 0.05, (h.main_cpu_attained, sampled)
