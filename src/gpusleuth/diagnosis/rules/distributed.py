"""Multi-rank rules from per-rank profiler traces: exposed communication (§6 F1, F2) and stragglers
(§6 F3, §7 N10).

Communication: collective time not hidden under compute (the trace analysis's ``comm`` device category
after compute is painted over it) ≥ 10 % of step time (PyTorch TB plugin) moderate, ≥ 30 % high (XProf's
CollectiveBound). Gain: overlapping hides at most the exposed part — an upper bound.

Stragglers: with ≥ 2 ranks, the slowest rank's median step vs the median of the others; (max − min) ÷ mean
> 5 % (Ascend advisor's slow-rank threshold). The evidence includes the slow rank's own idle causes, so
its root cause (its input pipeline, its host) is named, not just its number.
"""

from __future__ import annotations

import numpy as np

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import device_traces, gain_from_seconds, no_trace, run_seconds, step_idle

COMM_MODERATE = 0.10
COMM_HIGH = 0.30
STRAGGLER = 0.05


def exposed_communication(facts: Facts) -> list[Finding] | Missing:
    traces = device_traces(facts)
    if not traces:
        return no_trace("exposed communication", "communication", "a profiler trace with GPU activity")
    out = []
    for t in traces:
        exposed, total = step_idle(t, ("comm",))
        if not total or exposed / total < COMM_MODERATE:
            continue
        share = exposed / total
        ov = t.overlap.get("overlap_ratio")
        out.append(Finding(
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
        ))
    return out


def stragglers(facts: Facts) -> list[Finding] | Missing:
    ranked = [t for t in facts.traces if t.steps]
    if len(ranked) < 2:
        return no_trace("stragglers", "straggler", "profiler traces from ≥ 2 ranks of one job")
    med = np.array([np.median([s["duration_s"] for s in t.steps]) for t in ranked])
    spread = (med.max() - med.min()) / med.mean() if med.mean() > 0 else 0.0
    if spread <= STRAGGLER:
        return []
    slow = ranked[int(np.argmax(med))]
    causes = slow.idle_causes.get("share", {})
    top_cause = max(causes, key=causes.get) if causes else None
    saved = run_seconds(facts, (med.max() - np.median(med)) / med.max())
    return [Finding(
        cause="straggler", severity="high" if spread >= 0.2 else "moderate",
        title=f"Rank {slow.rank} is a straggler: median step {med.max() * 1e3:.1f} ms vs {np.median(med) * 1e3:.1f} ms",
        summary="Every collective waits for the slowest rank, so its extra time is paid by all ranks.",
        evidence=[Evidence("rank step-time spread (max−min)/mean", round(spread * 100, 1), "%", "per-rank traces"),
                  Evidence("slow rank's top idle cause", top_cause, "", f"trace {slow.label}")],
        fix=("Look at the slow rank's own report: its input pipeline (loader workers, storage), its clocks "
             "(throttling), its host (other processes). Balance data shards; exclude a faulty node."),
        estimated_gain=gain_from_seconds(facts, saved, "all ranks run at the median rank's step time"),
        confidence="medium",
    )]
