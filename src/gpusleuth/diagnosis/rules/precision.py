"""Precision: matrix math in fp32 on hardware whose fast path is TF32/bf16/fp16 Tensor Cores (§6 D1, D2).

Evidence is the trace's GEMM/conv kernel time by precision (kernel-name heuristics in
``analysis/trace/kernels``) and the tensor-core share of kernel time. Fires when fp32 GEMMs are ≥ 50 % of
GEMM time and GEMMs are ≥ 20 % of kernel time. Gain: fp32 → bf16 autocast runs those GEMMs ≥ 4× faster on
Ampere/Hopper (dense fp32 19.5–67 TFLOP/s vs bf16 312–990); we assume 4× on the GEMM time only (a floor:
on an H200 the planted scenario's fix measured ×9.5 for a ×3.7 prediction) and name the device's own
bf16:fp32 peak ratio as the ceiling. Idle time does not shrink.

The fp32 GEMM share of the step is a ratio of ratios over one population each — fp32 GEMM time over all
kernel time (the whole trace), times the device's compute share of the profiled steps — never whole-trace
kernel seconds over the steps' host windows: in a device-bound job the host runs ahead, its ProfilerStep
windows are short and the kernels they queued run later (an H200 run read "1232 % of step").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import gain_from_seconds, no_device_trace, run_seconds, step_idle
from gpusleuth.diagnosis.rules._scope import per_rank, rank_trace

if TYPE_CHECKING:  # the type of Facts.traces' items (rules see only Facts)
    from gpusleuth.analysis.trace import TraceAnalysis

FP32_SHARE = 0.5
GEMM_SHARE = 0.2
SPEEDUP = 4.0


@per_rank
def fp32_math(facts: Facts) -> list[Finding] | Missing:
    t = rank_trace(facts)
    if t is None:
        return no_device_trace(facts, "mixed precision", "precision", "a profiler trace with GPU kernels")
    k = t.kernels
    total = k.kernel_time_s
    prec = k.precision_s
    gemm = sum(prec.values())
    fp32 = prec.get("fp32", 0.0)
    if not total or gemm / total < GEMM_SHARE or not gemm or fp32 / gemm < FP32_SHARE:
        return []
    share_of_step = fp32 / total * compute_share(t)
    saved_share = share_of_step * (1 - 1 / SPEEDUP)
    bf16, fp32_peak = t.peak_tflops.get("bf16"), t.peak_tflops.get("fp32")
    ceiling = bf16 / fp32_peak if bf16 and fp32_peak else None
    up_to = (f"; up to {ceiling:.1f}× on this GPU's peaks (bf16 : fp32 dense, {t.peak_source})"
             if ceiling and ceiling > SPEEDUP else "")
    return [Finding(
        cause="precision", severity="high" if saved_share >= 0.2 else "moderate",
        title=f"fp32 matrix math: {fp32 / gemm:.0%} of GEMM time runs without Tensor Cores' fast path",
        summary=(f"GEMM/conv kernels took {gemm / total:.0%} of kernel time and {fp32 / gemm:.0%} of that was "
                 f"fp32; tensor-core kernels were {100 * (k.tensor_core_share or 0):.0f}% of kernel time."),
        evidence=[Evidence("fp32 share of GEMM time", round(100 * fp32 / gemm, 1), "%", f"kernel names, trace {t.label}"),
                  Evidence("GEMM share of kernel time", round(100 * gemm / total, 1), "%", "profiler trace"),
                  Evidence("tensor-core kernel share", round(100 * (k.tensor_core_share or 0), 1), "%",
                           "profiler trace")],
        fix=("Train in bf16 autocast: `with torch.autocast('cuda', dtype=torch.bfloat16): loss = model(x)` "
             "(fp16 needs `torch.amp.GradScaler`); at least allow TF32: "
             "`torch.set_float32_matmul_precision('high')`."),
        estimated_gain=gain_from_seconds(facts, run_seconds(facts, saved_share),
                                         f"fp32 GEMM time ({share_of_step:.0%} of step) runs at least "
                                         f"{SPEEDUP:.0f}× faster in bf16{up_to}; other kernels and idle time "
                                         "unchanged"),
        confidence="medium",
    )]


def compute_share(t: "TraceAnalysis") -> float:
    """The device's compute share of the profiled steps (of the device span when the trace has no steps)."""
    compute, window = step_idle(t, ("compute",))
    if not t.steps:
        window, compute = t.device_span_s, t.span_partition.get("compute", 0.0)
    return min(compute / window, 1.0) if window > 0 else 0.0

