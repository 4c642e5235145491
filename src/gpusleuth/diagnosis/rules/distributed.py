"""Exposed communication from per-rank profiler traces (§6 F1, F2). Stragglers (§6 F3, §7 N10) are
``rules/stragglers.py``: they need the ranks compared with each other, not one trace at a time.

Communication: collective time not hidden under compute (the trace analysis's ``comm`` device category
after compute is painted over it) ≥ 10 % of step time (PyTorch TB plugin) moderate, ≥ 30 % high (XProf's
CollectiveBound). Gain: overlapping hides at most the exposed part — an upper bound.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import gain_from_seconds, no_device_trace, run_seconds, step_idle
from gpusleuth.diagnosis.rules._scope import per_rank, rank_trace

COMM_MODERATE = 0.10
COMM_HIGH = 0.30


@per_rank
def exposed_communication(facts: Facts) -> list[Finding] | Missing:
    t = rank_trace(facts)
    if t is None:
        return no_device_trace(facts, "exposed communication", "communication", "a profiler trace with GPU activity")
    exposed, total = step_idle(t, ("comm",))
    if not total or exposed / total < COMM_MODERATE:
        return []
    share = exposed / total
    ov = t.overlap.overlap_ratio
    return [Finding(
        cause="communication", severity="high" if share >= COMM_HIGH else "moderate",
        title=f"Exposed communication: {share:.0%} of step time in collectives not hidden by compute",
        summary="Gradient/parameter collectives run while no compute runs: the device waits on the network.",
        evidence=[Evidence("exposed communication", round(share * 100, 1), "% of step time", f"trace {t.label}"),
                  Evidence("comm–compute overlap", None if ov is None else round(ov * 100, 1), "% of comm time",
                           "profiler trace (HTA definition)")],
        fix=("Overlap: DDP `bucket_cap_mb` tuning and `gradient_as_bucket_view=True`; FSDP `forward_prefetch`/"
             "`backward_prefetch`; bf16 gradient compression hooks; check NCCL uses NVLink/IB "
             "(`NCCL_DEBUG=INFO`)."),
        estimated_gain=gain_from_seconds(facts, run_seconds(facts, share),
                                         "all exposed communication hidden under compute (upper bound)"),
        confidence="medium",
    )]
