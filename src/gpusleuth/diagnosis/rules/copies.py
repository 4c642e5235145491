"""Copy-bound devices: more of the device's busy time goes to moving bytes than to computing.

The H2D rule (input.py) judges copies *exposed in step time*; a trace whose window is mostly untraced
host time (an Nsight capture with the CPU side off, unified-memory page migrations between kernel
launches) can hide a device that, whenever it works, mostly copies. This rule reads the device-span
partition: copies ≥ half of the busy time (compute + communication + copies + memset) and ≥ 10 ms.
Moderate; high when copies also fill ≥ 30 % of the device span. Where host-to-device copies are most of
the copy time and the H2D rule fires, that rule speaks (its title then says copy-bound); otherwise this one
(``copy_bound_speaks``), so a run that copies both ways is named copy-bound, not half-named.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import (COPY_MIN_S, COPY_SHARE, copy_bound_speaks, device_copies,
                                               no_device_trace, step_idle)
from gpusleuth.diagnosis.rules._scope import per_rank, rank_trace
from gpusleuth.diagnosis.rules.input.transfer import H2D, H2D_MODERATE

COPY_HIGH_SPAN = 0.3


@per_rank
def copy_bound(facts: Facts) -> list[Finding] | Missing:
    t = rank_trace(facts)
    if t is None:
        return no_device_trace(facts, "copy-bound device", "input.transfer", "a profiler trace with GPU activity")
    part = t.span_partition
    copies, busy = device_copies(t)
    copy_s = sum(copies.values())
    if not busy or copy_s < COPY_MIN_S or copy_s / busy < COPY_SHARE:
        return []
    exposed, total = step_idle(t, H2D)
    if total and exposed / total >= H2D_MODERATE and not copy_bound_speaks(t):
        return []  # the H2D rule names it, with its step-time share
    unlabeled = sum(v for k, v in copies.items() if k in ("memcpy_h2d", "memcpy_d2h"))
    pageable = sum(v for k, v in copies.items() if k.endswith("_pageable"))
    span_share = copy_s / t.device_span_s if t.device_span_s else 0.0
    # copies among the kernels recur (per iteration, on demand): copying less often is the fix. Copies
    # that only bracket the kernels (in once, out once) are a one-time transfer next to short compute —
    # named, not high (a held-out OpenMP export with a `target data` region: 3 copies around 50 kernels)
    recurring = t.device_time.copy_between_kernels_s >= 0.5 * copy_s
    return [Finding(
        cause="input.transfer",
        severity="high" if span_share >= COPY_HIGH_SPAN and recurring else "moderate",
        title=f"Copy-bound: {copy_s / busy:.0%} of the device's busy time is copies, "
              f"{part.get('compute', 0.0) / busy:.0%} compute",
        summary=(f"Whenever the device worked it mostly moved bytes ({copy_s * 1e3:,.1f} ms of copies against "
                 f"{part.get('compute', 0.0) * 1e3:,.1f} ms of kernels)"
                 + (f"; {unlabeled / copy_s:.0%} of the copy time has no host memory kind recorded, which in "
                    "an Nsight Systems export means unified-memory page migrations (cudaMallocManaged pages "
                    "faulted across on demand)" if unlabeled >= 0.5 * copy_s else "")
                 + ("" if recurring or unlabeled >= 0.5 * copy_s else "; the copies bracket the kernels (in before the first, out after "
                    "the last): a one-time transfer next to short compute, not copying every iteration")
                 + "."),
        evidence=[Evidence(f"device time: {k}", round(v * 1e3, 2), "ms", f"trace {t.label}")
                  for k, v in sorted(copies.items(), key=lambda kv: -kv[1])]
        + [Evidence("device time: compute", round(part.get("compute", 0.0) * 1e3, 2), "ms", f"trace {t.label}"),
           Evidence("copies / device span", round(span_share * 100, 1), "%", f"trace {t.label}"),
           Evidence("copy time from pageable host memory", round(pageable / copy_s * 100, 1), "%",
                    "trace memcpy kinds"),
           Evidence("copies between the first and last kernel",
                    round(t.device_time.copy_between_kernels_s / copy_s * 100, 1), "% of copy time",
                    f"trace {t.label}")],
        fix=_fix(unlabeled >= 0.5 * copy_s, recurring, pageable >= 0.5 * copy_s),
        estimated_gain=None, confidence="medium",
    )]


def _fix(migrations: bool, recurring: bool, pageable: bool) -> str:
    """What to do depends on what moves: managed pages faulted across, arrays copied every iteration, or
    one transfer in and out around short compute."""
    if migrations:
        return ("Move data once and keep it on the device: prefetch managed memory (`cudaMemPrefetchAsync`, "
                "`cudaMemAdvise`) or allocate on the device instead of `cudaMallocManaged`; batch small copies; "
                "pin host buffers and overlap copies with compute (`pin_memory=True`, `non_blocking=True`, a side "
                "stream).")
    if not recurring:
        return ("The data already moves once: pin the host buffers (`cudaMallocHost`, `.pin_memory()`) so the "
                "transfer runs at full PCIe speed, or split it into chunks on streams that overlap the kernels; a "
                "benchmark this short is dominated by its transfer — time more work per copy.")
    return ("Copy once, not every iteration: keep the arrays on the device across the loop (allocate there; an "
            "OpenMP `target data` / OpenACC `data` region around the loop; tensors created on the device) and "
            "bring back only the results you read"
            + ("; pin the host buffers that must move (`cudaMallocHost`, `.pin_memory()`): pageable copies run "
               "below PCIe speed and cannot overlap kernels" if pageable else
               "; overlap the rest with compute (`non_blocking=True`, a side stream)") + ".")
