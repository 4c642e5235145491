"""Rules on numbers alone (no processes): each fires on its evidence, stays quiet below its threshold,
predicts a gain with the shared definition, and says what is missing when its data is absent."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpusleuth.analysis.host_ops import HostOps
from gpusleuth.analysis.outcomes import Outcomes, StepStats
from gpusleuth.analysis.host_telemetry import HostSummary, ProcessSummary
from gpusleuth.diagnosis.engine import diagnose
from gpusleuth.diagnosis.facts import Facts, PhaseStats, Threads
from gpusleuth.diagnosis.finding import Missing
from gpusleuth.diagnosis.rules import host, memory, phases
from gpusleuth.diagnosis.rules._common import gain_from_seconds
from gpusleuth.diagnosis.taxonomy import CAUSES, STAGE_OF_CAUSE


def facts(steps=100, step_s=0.01, wait_s=0.0, opt_s=0.0, samples=32, **kw) -> Facts:
    s = StepStats(pid=1, steps=steps, step_time_s=steps * step_s, data_wait_s=wait_s, optimizer_s=opt_s,
                  samples=samples * steps, data_wait_share_of_steps=wait_s / (steps * step_s))
    loop = kw.pop("loop_s", steps * step_s)
    o = Outcomes(wall_s=loop + 1.0, startup_s=0.8, tail_s=0.2, time_share={}, time_s={}, steps=s)
    return Facts(outcomes=o, gpus=kw.pop("gpus", []), host=kw.pop("host", None), gpu_note="no GPU", loop_s=loop, **kw)


def host_summary(cpu_p50=99.0, workers=()):
    procs = [ProcessSummary(pid=10 + i, role="dataloader_worker", name="python",
                            cpu_pct={"mean": c, "p5": c, "p50": c, "p95": c, "max": c}, rss_max_bytes=None)
             for i, c in enumerate(workers)]
    dist = {"mean": cpu_p50, "p5": cpu_p50, "p50": cpu_p50, "p95": cpu_p50, "max": cpu_p50}
    return HostSummary(samples=10, logical_cores=2, cpu_pct=dist, iowait_pct=None, mem_used_max_bytes=None,
                       mem_total_bytes=None, disk_read_bytes=None, disk_write_bytes=None, net_rx_bytes=None,
                       net_tx_bytes=None, cgroup_throttled_share=None, main_pid=1, processes=procs,
                       workers=len(procs), worker_cpu_pct_mean=None, main_cpu_pct_mean=100.0)


def test_every_cause_has_a_stage():
    assert set(CAUSES) == set(STAGE_OF_CAUSE)


def test_gain_definition_is_loop_throughput():
    f = facts(steps=10, step_s=0.1, loop_s=2.0)
    g = gain_from_seconds(f, 1.0, "m")
    assert abs(g.speedup - 2.0) < 1e-9  # 2 s loop → 1 s
    assert abs(g.step_share - 1.0) < 1e-9  # 1 s of 1 s of step time
    assert gain_from_seconds(f, 5.0, "m").speedup < 1e4  # never beyond the loop


def test_eval_phase_is_expected_work_with_a_quantified_gain():
    f = facts(steps=80, step_s=0.01, loop_s=2.0,
              phases={"eval": PhaseStats("eval", count=8, total_s=1.2, mean_s=0.15, steps_between=10)})
    (fd,) = phases.phase_time(f)
    assert fd.cause == "phase.eval" and fd.severity == "moderate"
    assert "expected work" in fd.title
    assert abs(fd.estimated_gain.seconds_per_run - 1.2 * 0.75) < 1e-9
    assert "every 10 steps" in fd.fix
    # below 5 % of the loop: nothing to say
    f.phases["eval"].total_s = 0.05
    assert phases.phase_time(f) == []


def test_checkpoint_after_cost_counts_in_the_gain():
    """A checkpoint slows the step right after it (cold caches, writeback): that time is the checkpoint's."""
    ck = PhaseStats("checkpoint", count=100, total_s=0.5, mean_s=0.005, steps_between=2, after_penalty_s=0.3,
                    after_step_s=0.006, other_step_s=0.003)
    (fd,) = phases.phase_time(facts(steps=200, step_s=0.0045, loop_s=1.4, phases={"checkpoint": ck}))
    assert abs(fd.estimated_gain.seconds_per_run - 0.8 * 0.9) < 1e-9
    assert "300 ms it left in the steps right after it" in fd.estimated_gain.method
    assert any(e.name == "after-cost of 'checkpoint' in total" for e in fd.evidence)


def test_checkpoint_and_logging_aliases():
    f = facts(loop_s=2.0, phases={"ckpt": PhaseStats("ckpt", 30, 0.5, 0.016, 2),
                                 "logging": PhaseStats("logging", 60, 0.6, 0.01, 1)})
    causes = sorted(x.cause for x in phases.phase_time(f))
    assert causes == ["phase.checkpoint", "phase.logging"]


def test_step_overhead_fires_on_optimizer_share_and_bounds_its_prediction():
    f = facts(steps=100, step_s=0.01, opt_s=0.6, samples=4)  # optimizer 60 % of each step
    (fd,) = memory.step_overhead(f)
    assert fd.cause == "batch.too_small" and fd.severity == "high"
    assert "×16" in fd.fix or "16×" in fd.fix
    assert 1.0 < fd.estimated_gain.speedup < 16
    assert memory.step_overhead(facts(opt_s=0.1)) == []  # 10 %: fine


def test_oversubscription_needs_threads_beyond_the_free_cores():
    base = dict(steps=50, step_s=0.02)
    assert isinstance(host.oversubscription(facts(**base)), Missing)  # no thread count
    over = facts(**base, logical_cores=2, host=host_summary(workers=(90.0,)),
                 threads=Threads(torch_threads=8, worker_cpu_cores=0.9))
    (fd,) = host.oversubscription(over)
    assert fd.cause == "contention" and fd.severity == "high"
    assert "torch.set_num_threads(1)" in fd.fix
    fits = facts(**base, logical_cores=2, host=host_summary(workers=(90.0,)),
                 threads=Threads(torch_threads=1, worker_cpu_cores=0.9))
    assert host.oversubscription(fits) == []
    # 8 threads on 2 idle cores still lose time at barriers (measured 1.5–1.7× slower than 2 threads, with
    # libgomp's waiters asleep and the host far from 100 %): saturation is not required
    idle_host = facts(**base, logical_cores=2, host=host_summary(cpu_p50=40.0),
                      threads=Threads(torch_threads=8))
    (fd,) = host.oversubscription(idle_host)
    assert fd.severity == "high" and "torch.set_num_threads(2)" in fd.fix
    assert 1.2 < fd.estimated_gain.speedup < 1.6  # 45 % of the 75 % oversubscribed fraction of compute
    default = facts(**base, logical_cores=2, host=host_summary(cpu_p50=99.0, workers=(30.0,)),
                    threads=Threads(torch_threads=2, worker_cpu_cores=0.3))
    assert host.oversubscription(default) == []  # torch's default (one thread a core) beside a light worker


def test_python_overhead_from_host_ops():
    ops = HostOps(label="t", steps=10, step_time_median_s=0.01, ops_per_step=540, tiny_ops_per_step=530,
                  median_op_us=1.3, op_share=0.5, python_share=0.5, tiny_op_share=0.45, repeat=16,
                  looped_ops_per_step=512, loop_python_share=0.4, loop_op_share=0.4, removable_share=0.8,
                  tiny_op_threshold_us=20, excluded_s_per_step=0.0)
    (fd,) = host.python_overhead(facts(host_ops=[ops]))
    assert fd.cause == "host.python" and fd.severity == "high"
    assert fd.estimated_gain.speedup == pytest.approx(1 / (1 - 0.8), rel=0.01)  # what the loop's removal removes
    few = replace(ops, looped_ops_per_step=18, ops_per_step=20)
    assert host.python_overhead(facts(host_ops=[few])) == []
    # short ops and Python between ops that no loop issues (a small model's layers, a framework's hooks) are
    # not removable by vectorizing: no finding however large their share
    framework = replace(ops, looped_ops_per_step=16, removable_share=0.03)
    assert host.python_overhead(facts(host_ops=[framework])) == []
    missing = host.python_overhead(facts())
    assert isinstance(missing, Missing) and "--profile-steps" in missing.how


def test_engine_ranks_and_reports_missing_data():
    f = facts(steps=100, step_s=0.01, opt_s=0.46, loop_s=3.0,
              phases={"eval": PhaseStats("eval", 8, 2.0, 0.25, 12)})
    findings, missing = diagnose(f)
    assert findings[0].cause == "phase.eval"  # larger gain first among moderate findings
    assert {m.cause for m in missing} >= {"throttling", "precision", "sync"}
    assert all(m.how for m in missing)
    quiet, _ = diagnose(facts())
    assert [x.cause for x in quiet] == ["healthy"]
