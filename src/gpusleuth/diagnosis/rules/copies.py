"""Copy-bound devices: more of the device's busy time goes to moving bytes than to computing.

The H2D rule (input.py) judges copies *exposed in step time*; a trace whose window is mostly untraced
host time (an Nsight capture with the CPU side off, unified-memory page migrations between kernel
launches) can hide a device that, whenever it works, mostly copies. This rule reads the device-span
partition: copies ≥ half of the busy time (compute + communication + copies + memset) and ≥ 10 ms.
Moderate; high when copies also fill ≥ 30 % of the device span. Quiet where the H2D rule already fires.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import device_traces, no_trace, step_idle
from gpusleuth.diagnosis.rules.input import H2D, H2D_MODERATE

COPY_SHARE = 0.5
COPY_MIN_S = 0.010
COPY_HIGH_SPAN = 0.3
BUSY_CATS = ("compute", "comm", "memset")


def copy_bound(facts: Facts) -> list[Finding] | Missing:
    traces = device_traces(facts)
    if not traces:
        return no_trace("copy-bound device", "input.transfer", "a profiler trace with GPU activity")
    out = []
    for t in traces:
        part = t.span_partition
        copies = {k: v for k, v in part.items() if k.startswith("memcpy") and v > 0}
        copy_s = sum(copies.values())
        busy = copy_s + sum(part.get(k, 0.0) for k in BUSY_CATS)
        if not busy or copy_s < COPY_MIN_S or copy_s / busy < COPY_SHARE:
            continue
        exposed, total = step_idle(t, H2D)
        if total and exposed / total >= H2D_MODERATE:
            continue  # the H2D rule names it, with its step-time share
        unlabeled = sum(v for k, v in copies.items() if k in ("memcpy_h2d", "memcpy_d2h"))
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
               Evidence("copies / device span", round(span_share * 100, 1), "%", f"trace {t.label}")],
            fix=("Move data once and keep it on the device: prefetch managed memory "
                 "(`cudaMemPrefetchAsync`, `cudaMemAdvise`) or allocate on the device instead of "
                 "`cudaMallocManaged`; batch small copies; pin host buffers and overlap copies with compute "
                 "(`pin_memory=True`, `non_blocking=True`, a side stream)."),
            estimated_gain=None, confidence="medium",
        ))
    return out
