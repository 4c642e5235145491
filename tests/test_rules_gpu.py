"""GPU-side rules on numbers alone: trace-partition rules (sync, launch, precision, H2D, communication,
stragglers) on stand-in trace analyses, telemetry rules (throttling, busy-but-idle, sizing) on summaries.
The same rules run on real traces in tests/test_trace_analysis.py's fixtures via the report."""

from __future__ import annotations

from dataclasses import replace

from gpusleuth.analysis.telemetry import GpuSummary
from gpusleuth.analysis.trace import IDLE_CATS, IdleCauses, StepPartition, TraceStepStats, TraceAnalysis
from gpusleuth.analysis.trace.kernels import NO_KERNELS, ShortKernels
from gpusleuth.analysis.trace.launch import NO_LAUNCHES, LaunchCost
from gpusleuth.analysis.trace.timeline import CommOverlap, DeviceTime
from gpusleuth.diagnosis.finding import Missing
from gpusleuth.diagnosis.rules import busy_idle, copies, distributed, precision, sizing, stragglers, sync, throttling
from gpusleuth.diagnosis.rules.input import transfer as input_rules
from test_rules_cpu import facts


def trace(partition, rank=0, dur=0.01, n=5, kernels=NO_KERNELS, launch=NO_LAUNCHES, overlap=None):
    """A stand-in trace analysis of ``n`` identical steps, each split as ``partition`` (seconds), built from
    the real types: a rule reading a field the analysis does not have fails here as it would on a trace."""
    steps = [StepPartition(step=i, start_s=i * dur, duration_s=dur, partition=dict(partition),
                           comm_overlapped_s=0.0) for i in range(n)]
    span = {k: v * n for k, v in partition.items()}
    copies = sum(v for k, v in span.items() if k.startswith("memcpy"))
    idle = {c: span.get(c, 0.0) for c in IDLE_CATS}
    busy = dur * n - sum(idle.values())
    return TraceAnalysis(
        rank=rank, label=f"rank{rank}", device=None, device_span_s=dur * n, compute=span.get("compute", 0.0) / (dur * n),
        non_compute=(busy - span.get("compute", 0.0)) / (dur * n), idle=sum(idle.values()) / (dur * n),
        device_time=DeviceTime(busy_s=busy, compute_s=span.get("compute", 0.0),
                               non_compute_s=busy - span.get("compute", 0.0), idle_s=sum(idle.values()),
                               copy_between_kernels_s=copies),
        span_partition=span, trace_window_s=dur * n, trace_partition=span, steps=steps,
        step_stats=TraceStepStats(count=n, mean_s=dur, median_s=dur, std_s=0.0, cv=0.0, min_s=dur, max_s=dur),
        idle_causes=IdleCauses(total_s=sum(idle.values()), seconds=idle,
                               share={c: v / (sum(idle.values()) or 1.0) for c, v in idle.items()}, over="steps"),
        kernels=kernels, launch=launch, overlap=overlap or CommOverlap(0.0, 0.0, 0.0, None))


def short_kernels(share):
    return ShortKernels(threshold_us=10.0, count=int(100 * share), count_share=share, time_share=share)


def dist(v):
    return {"mean": v, "p5": v, "p50": v, "p95": v, "max": v}


def gpu(util=90.0, mem=0.3, sm=None, throttled=None, clock=None, power=None):
    return GpuSummary(index=0, name="H100", samples=100, util_gpu=dist(util), util_mem=None,
                      mem_used_max_bytes=mem * 80e9, mem_total_bytes=80e9, mem_used_share_max=mem,
                      power_w=None if power is None else dist(power), energy_j=None, temp_c=dist(70),
                      sm_clock_mhz=None if clock is None else dist(clock), max_sm_clock_mhz=1980,
                      throttled_share=throttled or {}, sm_active=None if sm is None else dist(sm))


def test_sync_from_trace_partition():
    f = facts(traces=[trace({"compute": 0.006, "idle_sync": 0.004})])
    (fd,) = sync.sync_stalls(f)
    assert fd.cause == "sync" and fd.severity == "high" and ".item()" in fd.fix
    assert abs(fd.estimated_gain.step_share - 0.4) < 1e-6
    assert sync.sync_stalls(facts(traces=[trace({"compute": 0.0099, "idle_sync": 0.0001})])) == []
    assert isinstance(sync.sync_stalls(facts()), Missing)


def test_launch_bound_needs_short_kernels():
    t = trace({"compute": 0.005, "idle_launch": 0.003, "idle_kernel_gap": 0.002},
              kernels=replace(NO_KERNELS, short_kernels=short_kernels(0.9)),
              launch=replace(NO_LAUNCHES, launch_cost_us=LaunchCost(median=6.0, p95=9.0, total_s=0.001)))
    (fd,) = sync.launch_bound(facts(traces=[t]))
    assert fd.cause == "host.launch_bound" and "torch.compile" in fd.fix
    assert any(e.value == 6.0 for e in fd.evidence)  # the launch cost read from the launch statistics
    t = replace(t, kernels=replace(NO_KERNELS, short_kernels=short_kernels(0.1)))
    assert sync.launch_bound(facts(traces=[t])) == []


def test_precision_fp32_gemms():
    k = replace(NO_KERNELS, kernel_time_s=0.04, precision_s={"fp32": 0.03}, tensor_core_share=0.0)
    (fd,) = precision.fp32_math(facts(traces=[trace({"compute": 0.01}, kernels=k)]))
    assert fd.cause == "precision" and "autocast" in fd.fix
    k2 = replace(NO_KERNELS, kernel_time_s=0.04, precision_s={"bf16": 0.03})
    assert precision.fp32_math(facts(traces=[trace({"compute": 0.01}, kernels=k2)])) == []


def test_pageable_h2d():
    t = trace({"compute": 0.007, "memcpy_h2d_pageable": 0.003})
    (fd,) = input_rules.h2d_transfer(facts(traces=[t]))
    assert fd.cause == "input.transfer" and "pin_memory=True" in fd.fix


def test_copies_both_ways_are_copy_bound_not_half_named():
    """The held-out OpenMP-offload export's shape: 49 % H2D + 47 % D2H (pageable), 4 % compute. The H2D
    rule alone said "H2D exposed 49 %, moderate"; the copy-bound rule speaks, high, and the H2D rule stays
    quiet so the copies are named once."""
    t = trace({"compute": 0.0004, "memcpy_h2d_pageable": 0.0049, "memcpy_d2h_pageable": 0.0047})
    f = facts(traces=[t])
    assert input_rules.h2d_transfer(f) == []
    (fd,) = copies.copy_bound(f)
    assert fd.title.startswith("Copy-bound: 96%") and fd.severity == "high" and "pin the host buffers" in fd.fix
    # mostly H2D: the H2D rule speaks (with its overlap gain) and says copy-bound; the copy-bound rule is quiet
    t2 = trace({"compute": 0.0004, "memcpy_h2d_pinned": 0.0096})
    (fd2,) = input_rules.h2d_transfer(facts(traces=[t2]))
    assert fd2.title.startswith("Copy-bound: Host-to-device copies exposed: 96%")
    assert copies.copy_bound(facts(traces=[t2])) == []
    # the same copies only bracketing the kernels (in once, out once): named, moderate, no "every iteration"
    t = replace(t, device_time=replace(t.device_time, copy_between_kernels_s=0.0))
    (fd4,) = copies.copy_bound(facts(traces=[t]))
    assert fd4.severity == "moderate" and "one-time transfer" in fd4.summary and "every iteration:" not in fd4.fix
    # copies a small part of busy time: neither says copy-bound
    t3 = trace({"compute": 0.007, "memcpy_h2d_pageable": 0.003})
    (fd3,) = input_rules.h2d_transfer(facts(traces=[t3]))
    assert not fd3.title.startswith("Copy-bound") and copies.copy_bound(facts(traces=[t3])) == []


def test_straggler_from_per_rank_traces_claims_no_arrivals():
    """From traces the slow rank is the one with the least collective kernel time per step (the others'
    kernels spin waiting for it): 30 ms of a 100 ms step here. A trace has no arrival times, so the finding
    says how it knows, not 'arrived last at 100 %', and the per-rank arrival share is unknown (None)."""
    from gpusleuth.analysis.comm import trace_comm_summary

    waiting = trace({"compute": 0.05, "comm": 0.04}, rank=0, dur=0.1)
    slow = trace({"compute": 0.08, "comm": 0.01}, rank=1, dur=0.1)
    comm = trace_comm_summary([waiting, slow])
    assert [r.last_share for r in comm.ranks] == [None, None] and comm.slow_rank == 1
    assert abs(comm.lost_per_step_s - 0.03) < 1e-9 and comm.step_coverage == 1.0
    (fd,) = stragglers.straggler(facts(traces=[waiting, slow], comm=comm))
    assert fd.cause == "straggler" and fd.severity == "high" and fd.title.startswith("Rank 1 ")
    assert "spends the least time in collectives" in fd.summary and "arrived last" not in fd.summary
    balanced = trace_comm_summary([waiting, trace({"compute": 0.051, "comm": 0.039}, rank=1, dur=0.1)])
    (quiet,) = stragglers.straggler(facts(traces=[waiting], comm=balanced))
    assert quiet.severity == "none"


def test_exposed_communication():
    # stragglers are judged from collectives matched across ranks: tests/test_distributed.py, on real jobs
    t = trace({"compute": 0.006, "comm": 0.004}, overlap=CommOverlap(comm_s=0.025, overlapped_s=0.005,
                                                                       exposed_s=0.02, overlap_ratio=0.2))
    (fd,) = distributed.exposed_communication(facts(traces=[t]))
    assert fd.cause == "communication"
    assert any(e.value == 20.0 for e in fd.evidence)  # the overlap ratio, in %


def test_throttling_from_counters():
    f = facts(gpus=[gpu(throttled={"sw_power_cap": 0.3}, clock=1500)])
    (fd,) = throttling.clock_throttling(f)
    assert fd.cause == "throttling" and fd.severity == "high"
    assert throttling.clock_throttling(facts(gpus=[gpu()])) == []
    assert isinstance(throttling.clock_throttling(facts()), Missing)


def test_busy_but_idle_and_sizing():
    (fd,) = busy_idle.busy_but_idle(facts(gpus=[gpu(util=98, sm=20)]))
    assert fd.cause == "sizing" and "98%" in fd.title
    assert busy_idle.busy_but_idle(facts(gpus=[gpu(util=98, sm=80)])) == []
    (sz,) = sizing.sizing_vs_stall(facts(gpus=[gpu(util=30, mem=0.1)]))
    assert sz.cause == "sizing" and "MIG" in sz.fix
    stalled = facts(gpus=[gpu(util=30, mem=0.1)], traces=[trace({"compute": 0.005, "idle_sync": 0.005})])
    assert sizing.sizing_vs_stall(stalled) == []  # a stall is not a sizing problem


def test_the_engine_calls_a_per_rank_or_per_gpu_rule_once_per_rank_or_gpu_and_merges():
    """A rule marked @per_rank / @per_gpu (rules/_scope.py) is written for one rank or one card: given the
    whole job it refuses, and the engine calls it on each rank's (GPU's) view and keeps one finding per cause
    for the job, the worst one's, naming every other rank or card it fired on. Fails if the engine stops
    iterating (the rule refuses the job's facts) or stops merging (two findings)."""
    from dataclasses import replace

    import pytest

    from gpusleuth.diagnosis.engine import diagnose

    ranks = [trace({"compute": 0.006, "idle_sync": 0.004}, rank=0),
             trace({"compute": 0.007, "idle_sync": 0.003}, rank=1),
             trace({"compute": 0.0099, "idle_sync": 0.0001}, rank=2)]  # below the threshold: silent
    with pytest.raises(ValueError, match="once per rank"):
        sync.sync_stalls(facts(traces=ranks))
    per_rank = [sync.sync_stalls(facts(traces=ranks).for_rank(t)) for t in ranks]
    assert [len(r) for r in per_rank] == [1, 1, 0]
    found = [f for f in diagnose(facts(traces=ranks))[0] if f.cause == "sync"]
    assert len(found) == 1 and "Seen on 2 ranks" in found[0].summary
    assert abs(found[0].estimated_gain.step_share - 0.4) < 1e-6  # the worst rank speaks
    assert found[0].evidence[0].source == "profiler trace rank0"
    assert [e.source for e in found[0].evidence if e.name == "same cause on another rank"] == ["profiler trace rank1"]
    assert found[0].title == per_rank[0][0].title and found[0].missing == []

    cards = [gpu(throttled={"sw_power_cap": 0.3}, clock=1500), replace(gpu(throttled={"sw_power_cap": 0.2},
                                                                           clock=1500), index=1)]
    with pytest.raises(ValueError, match="once per GPU"):
        throttling.clock_throttling(facts(gpus=cards))
    assert [len(throttling.clock_throttling(facts(gpus=cards).for_gpu(g))) for g in cards] == [1, 1]
    found = [f for f in diagnose(facts(gpus=cards))[0] if f.cause == "throttling"]
    assert len(found) == 1 and "Seen on 2 GPUs" in found[0].summary and found[0].title.startswith("GPU 0 ")
    assert [e.value for e in found[0].evidence if e.name == "same cause on another GPU"][0].startswith("GPU 1 ")


def test_a_rank_without_the_data_is_listed_as_not_judged_beside_the_finding_of_the_others():
    """Rank 1's trace is CPU-only: the device rules fire on rank 0 and are not evaluated on rank 1 — the
    finding stands, and both the finding and the not-evaluated list say which rank was not looked at."""
    from dataclasses import replace

    from gpusleuth.diagnosis.engine import diagnose

    cpu_only = replace(trace({"compute": 0.01}, rank=1), device_span_s=0.0)
    findings, missing = diagnose(facts(traces=[trace({"compute": 0.006, "idle_sync": 0.004}, rank=0), cpu_only]))
    (s,) = [f for f in findings if f.cause == "sync"]
    assert "Seen on" not in s.summary and s.missing == [
        "not judged on rank 1 (1 of 2 ranks): needs a profiler trace with GPU activity (this run's profiler traces "
        "are CPU-only: no kernels or copies)"]
    (m,) = [m for m in missing if m.rule.startswith("host-device synchronization")]
    assert m.rule == "host-device synchronization, on rank 1 (1 of 2 ranks)" and m.cause == "sync"
    # every rank lacked it: the rule's own Missing, once, as for a job of one rank
    other = replace(trace({"compute": 0.01}, rank=2), device_span_s=0.0)
    _, missing = diagnose(facts(traces=[cpu_only, other]))
    alone = sync.sync_stalls(facts(traces=[cpu_only]))
    assert isinstance(alone, Missing)
    (m,) = [m for m in missing if m.cause == "sync" and m.rule.startswith("host-device")]
    assert m.rule == "host-device synchronization" and m.needs == alone.needs
    # no rank at all: the rule on the whole facts says what it lacks
    _, missing = diagnose(facts())
    (m,) = [m for m in missing if m.rule == "host-device synchronization"]
    assert m.needs == "a profiler trace with GPU activity"
