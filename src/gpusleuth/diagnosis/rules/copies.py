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
                                               device_traces, no_trace, step_idle)
from gpusleuth.diagnosis.rules.input import H2D, H2D_MODERATE

COPY_HIGH_SPAN = 0.3


def copy_bound(facts: Facts) -> list[Finding] | Missing:
    traces = device_traces(facts)
    if not traces:
        return no_trace("copy-bound device", "input.transfer", "a profiler trace with GPU activity")
    out = []
    for t in traces:
        part = t.span_partition
        copies, busy = device_copies(t)
        copy_s = sum(copies.values())
        if not busy or copy_s < COPY_MIN_S or copy_s / busy < COPY_SHARE:
            continue
        exposed, total = step_idle(t, H2D)
        if total and exposed / total >= H2D_MODERATE and not copy_bound_speaks(t):
            continue  # the H2D rule names it, with its step-time share
        unlabeled = sum(v for k, v in copies.items() if k in ("memcpy_h2d", "memcpy_d2h"))
        pageable = sum(v for k, v in copies.items() if k.endswith("_pageable"))
        span_share = copy_s / t.device_span_s if t.device_span_s else 0.0
        out.append(Finding(
            cause="input.transfer", severity="high" if span_share >= COPY_HIGH_SPAN else "moderate",
            title=f"Copy-bound: {copy_s / busy:.0%} of the device's busy time is copies, "
                  f"{part.get('compute', 0.0) / busy:.0%} compute",
            summary=(f"Whenever the device worked it mostly moved bytes ({copy_s * 1e3:,.1f} ms of copies against "
                     f"{part.get('compute', 0.0) * 1e3:,.1f} ms of kernels)"
                     + (f"; {unlabeled / copy_s:.0%} of the copy time has no host memory kind recorded, which in "
                        "an Nsight Systems export means unified-memory page migrations (cudaMallocManaged pages "
                        "faulted across on demand)" if unlabeled >= 0.5 * copy_s else "")
                     + "."),
            evidence=[Evidence(f"device time: {k}", round(v * 1e3, 2), "ms", f"trace {t.label}")
                      for k, v in sorted(copies.items(), key=lambda kv: -kv[1])]
            + [Evidence("device time: compute", round(part.get("compute", 0.0) * 1e3, 2), "ms", f"trace {t.label}"),
               Evidence("copies / device span", round(span_share * 100, 1), "%", f"trace {t.label}"),
               Evidence("copy time from pageable host memory", round(pageable / copy_s * 100, 1), "%",
                        "trace memcpy kinds")],
            fix=(("Move data once and keep it on the device: prefetch managed memory "
                  "(`cudaMemPrefetchAsync`, `cudaMemAdvise`) or allocate on the device instead of "
                  "`cudaMallocManaged`; batch small copies; pin host buffers and overlap copies with compute "
                  "(`pin_memory=True`, `non_blocking=True`, a side stream).") if unlabeled >= 0.5 * copy_s else
                 ("Copy once, not every iteration: keep the arrays on the device across the loop (allocate "
                  "there; an OpenMP `target data` / OpenACC `data` region around the loop; tensors created "
                  "on the device) and bring back only the results you read"
                  + ("; pin the host buffers that must move (`cudaMallocHost`, `.pin_memory()`): pageable "
                     "copies run below PCIe speed and cannot overlap kernels" if pageable >= 0.5 * copy_s
                     else "; overlap the rest with compute (`non_blocking=True`, a side stream)") + ".")),
            estimated_gain=None, confidence="medium",
        ))
    return out
