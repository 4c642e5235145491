"""The wall-time partition: phases are carved out of steps, and the shares always sum to one."""

from __future__ import annotations

import numpy as np
import pytest

from gpusleuth.analysis.outcomes import compute_outcomes
from gpusleuth.run.model import Run, Table

S = 1_000_000_000


def steps_table(bounds, wait=0, pid=1):
    starts = np.array(bounds[:-1], dtype=np.int64)
    ends = np.array(bounds[1:], dtype=np.int64)
    n = len(starts)
    return Table({
        "step": np.arange(n), "pid": np.full(n, pid), "start_ns": starts, "end_ns": ends,
        "data_wait_ns": np.full(n, wait), "data_cpu_ns": np.zeros(n, np.int64), "samples": np.full(n, 10),
        "optimizer_ns": np.zeros(n, np.int64), "fetches": np.ones(n, np.int64),
        "delimiter": np.array(["optimizer"] * n, dtype=object), "gpu_ns": np.full(n, -1),
    })


def phases_table(rows):
    return Table({
        "name": np.array([r[0] for r in rows], dtype=object), "pid": np.ones(len(rows), np.int64),
        "start_ns": np.array([r[1] for r in rows], np.int64), "end_ns": np.array([r[2] for r in rows], np.int64),
        "source": np.array(["api"] * len(rows), dtype=object),
    })


def test_eval_inside_a_step_is_carved_out():
    # run 0..20 s; steps 2..4..6..16 (the last one contains an 8 s eval); tail 16..20
    run = Run(meta={"start_ns": 0, "end_ns": 20 * S},
              steps=steps_table([2 * S, 4 * S, 6 * S, 16 * S], wait=S // 2),
              phases=phases_table([("eval", 7 * S, 15 * S)]))
    o = compute_outcomes(run)
    assert o.time_s["eval"] == pytest.approx(8)
    assert o.time_s["startup"] == pytest.approx(2)
    assert o.time_s["data_wait"] == pytest.approx(1.5)
    assert o.time_s["compute"] == pytest.approx(6 - 1.5)  # 2 + 2 + (10 - 8) seconds of steps
    assert o.time_s["other"] == pytest.approx(4)  # the idle tail
    assert o.tail_s == pytest.approx(4)
    assert sum(o.time_share.values()) == pytest.approx(1.0, abs=1e-12)
    assert o.steps.step_time_p50_s == pytest.approx(2)  # the eval does not make a slow step
    assert o.steps.samples_per_s == pytest.approx(30 / 6)


def test_overlapping_phases_of_different_names_are_counted_once():
    run = Run(meta={"start_ns": 0, "end_ns": 10 * S}, steps=steps_table([0, 2 * S]),
              phases=phases_table([("eval", 3 * S, 6 * S), ("checkpoint", 5 * S, 8 * S)]))
    o = compute_outcomes(run)
    assert o.time_s["eval"] == pytest.approx(3) and o.time_s["checkpoint"] == pytest.approx(2)
    assert sum(o.time_share.values()) == pytest.approx(1.0, abs=1e-12)


def test_no_steps_is_all_other():
    o = compute_outcomes(Run(meta={"start_ns": 0, "end_ns": 3 * S}))
    assert o.time_share == {"startup": 0.0, "data_wait": 0.0, "compute": 0.0, "other": 1.0}
    assert o.steps.steps == 0


def test_the_process_with_most_steps_is_the_training_loop():
    a = steps_table([0, S, 2 * S, 3 * S], pid=7)
    b = steps_table([0, 3 * S], pid=8)
    both = Table({k: np.concatenate([a[k], b[k]]) for k in a})
    o = compute_outcomes(Run(meta={"start_ns": 0, "end_ns": 3 * S}, steps=both))
    assert o.steps.pid == 7 and o.steps.steps == 3 and o.steps.other_processes_with_steps == [8]
