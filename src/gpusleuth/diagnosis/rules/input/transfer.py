"""``input.transfer``: host-to-device copies exposed on the device timeline (the rule ``h2d_transfer``)."""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import (COPY_SHARE, copy_bound_speaks, device_cats, device_copies, gain_from_seconds,
                                               no_device_trace, run_seconds, step_idle)
from gpusleuth.diagnosis.rules._scope import per_rank, rank_trace
from gpusleuth.diagnosis.rules.input._shared import training_loader

H2D = ("memcpy_h2d_pageable", "memcpy_h2d", "memcpy_h2d_pinned")
H2D_MODERATE = 0.05
H2D_HIGH = 0.20
OVERLAP_CATS = ("compute", "comm")  # device work a copy can run under


@per_rank
def h2d_transfer(facts: Facts) -> list[Finding] | Missing:
    """Host-to-device copies exposed on the device timeline (§6 B4, C6): the device copies instead of
    computing, and pageable source memory makes "async" copies synchronous. Fires at ≥ 5 % of step time.

    Gain: pinned memory + ``non_blocking=True`` (or a prefetching side stream) lets a copy run *under*
    other device work; it cannot make the bytes free. So the most it saves is the exposed copy time the
    step's compute and communication could hide: min(exposed copies, other device work). Severity follows
    that gain (≥ 20 % of step time high), not the copy share: a window that is all copies and no compute
    (weights being loaded, a unified-memory storm) is named, but not promised a speed-up. When the copies
    already come from pinned memory the fix says so instead of recommending what the job already does."""
    t = rank_trace(facts)
    if t is None:
        return no_device_trace(facts, "host-to-device copies", "input.transfer", "a profiler trace with GPU activity")
    loader = training_loader(facts)
    exposed, total = step_idle(t, H2D)
    if not total or exposed / total < H2D_MODERATE or copy_bound_speaks(t):
        return []
    copies, busy = device_copies(t)
    copy_bound = busy > 0 and sum(copies.values()) / busy >= COPY_SHARE
    share = exposed / total
    pageable = step_idle(t, ("memcpy_h2d_pageable",))[0] / exposed if exposed else 0.0
    other_work = step_idle(t, OVERLAP_CATS)[0] / total
    # Two ways the fix pays, and the step is bound by whichever side is slower after it: the host no longer
    # blocks in its copy calls (a pageable copy is synchronous), and the device hides the copies under its
    # other work. Device-bound, the first is nothing; host-bound with synchronous copies, the second is small.
    blocked = t.copy_calls.h2d_call_share
    device_busy = step_idle(t, device_cats(t))[0] / total
    after = max(1.0 - blocked, device_busy - min(share, other_work))
    saved_share = max(min(share, other_work), 1.0 - after)
    pinned_already = pageable < 0.2 and (loader is None or loader.get("pin_memory") is not False)
    if pinned_already:
        fix = ("The copies already come from pinned memory, so pinning is not the fix: send fewer bytes. Keep "
               "tensors that do not change on the device across steps (weights, constants, masks); prefetch the "
               "next batch on a side stream (`torch.cuda.Stream()` + `non_blocking=True`) so it overlaps this "
               "step's compute; ship compact dtypes (uint8/bf16) and convert on the device. If this window is "
               "start-up (loading weights), profile steady-state steps instead.")
    else:
        fix = ("DataLoader(..., pin_memory=True) and `x = x.to('cuda', non_blocking=True)`; for tensors built "
               "outside a loader, `.pin_memory()` once; create constant tensors directly on the device.")
    evidence = [Evidence("exposed H2D copies", round(share * 100, 1), "% of step time", f"trace {t.label}"),
                Evidence("from pageable memory", round(pageable * 100, 1), "% of H2D copy time", "trace memcpy kinds"),
                Evidence("other device work (could hide copies)", round(other_work * 100, 1), "% of step time",
                         "trace partition")]
    if loader is not None:
        evidence.append(Evidence("DataLoader pin_memory", loader.get("pin_memory"), "", "DataLoader seen at run time"))
    if blocked > 0 and 1.0 - after > min(share, other_work):
        method = (f"the host stops blocking in its copy calls ({blocked:.0%} of step time) and the copies run beside "
                  f"the step's other work; the device's own busy time ({device_busy:.0%}, copies at the pageable "
                  "rate measured here) bounds the step — from pinned memory the copies also run faster, which "
                  "this run cannot measure (a lower bound)")
    else:
        method = "exposed copy time hidden under the step's other device work (at most that work; upper bound)"
    if blocked > 0:
        evidence.append(Evidence("host blocked in copy calls", round(blocked * 100, 1), "% of step time",
                                 "profiler trace copy calls"))
    return [Finding(
        cause="input.transfer", severity="high" if saved_share >= H2D_HIGH else "moderate",
        title=("Copy-bound: " if copy_bound else "")
        + f"Host-to-device copies exposed: {share:.0%} of step time ({pageable:.0%} from pageable memory)",
        summary=("The device spends part of each step copying inputs instead of computing"
                 + ("; copies from pageable memory cannot overlap compute." if not pinned_already else
                    f"; the step has {other_work:.0%} of other device work to hide copies under.")),
        evidence=evidence,
        fix=fix,
        estimated_gain=gain_from_seconds(facts, run_seconds(facts, saved_share), method),
        confidence="medium",
    )]
