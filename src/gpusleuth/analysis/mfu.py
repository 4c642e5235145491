"""Model FLOPs utilization: achieved model FLOP/s ÷ the device's dense peak, with its convention printed.

FLOPs per step come from, in order of preference:
1. the user (``--flops-per-step``), or ``6·N·tokens`` per step when the user gives the parameter count N
   (``--params``) and the job logs tokens — the PaLM/torchtitan convention for transformer training;
2. a measurement the hook takes once on a real step with ``torch.utils.flop_counter.FlopCounterMode``
   (forward + backward + anything recomputed: matmuls, convolutions and attention, 2 FLOPs per
   multiply-add; pointwise ops are not counted, as MLPerf asks).
When both an analytic count and a measurement exist, MFU uses the analytic count and the measurement is
reported as HFU (hardware FLOPs, recomputation included).

The peak is the dense (no-sparsity) tensor peak of the exact GPU model for one dtype (default bf16, the
common MFU convention), or ``--peak-tflops``. When the card has no peak for the default (T4 and V100 have
no bf16 tensor cores) the job's own GEMM dtype (from its profiler trace) is used instead, and said so. A
MIG instance gets its slice of the parent's peak. On a CPU there is no peak in the table: MFU is not
defined unless the user gives one.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpusleuth.analysis.peaks import Peak, lookup_peak, peak_dtypes
from gpusleuth.run.model import Run


@dataclass
class MfuOptions:
    flops_per_step: float | None = None
    params: float | None = None  # model parameters N for 6·N·tokens
    peak_tflops: float | None = None
    peak_dtype: str = "bf16"


@dataclass
class Mfu:
    mfu: float | None
    hfu: float | None
    flops_per_step: float | None
    flops_source: str | None
    achieved_tflops: float | None  # per GPU
    peak: Peak | None
    gpus: int
    convention: str
    sm_clock_ratio: float | None = None  # achieved SM clock ÷ max (throttling shows here)
    why_not: str | None = None


def measured_flops(run: Run, main: int | None) -> tuple[float | None, int | None]:
    """The hook's count of one step of the main process (the step view's: one derivation of "main")."""
    for info in run.infos:
        if info.get("kind") == "flops" and info.get("flops") and (main is None or info.get("pid") == main):
            return float(info["flops"]), info.get("step")
    return None, None


def flops_skipped(run: Run, main: int | None) -> str | None:
    """Why the hook did not count a step's FLOPs (a step too long to slow several-fold), if it said."""
    for info in run.infos:
        if info.get("kind") == "flops_skipped" and (main is None or info.get("pid") == main):
            return str(info.get("why") or "the step was too long to count")
    return None


def compute_mfu(run: Run, step_time_s: float | None, tokens_per_step: float | None, gpu_name: str | None,
                gpus: int, sm_clock_ratio: float | None, opts: MfuOptions, job_dtype: str | None = None,
                sm_count: int | None = None, main: int | None = None) -> Mfu:
    """``job_dtype``: the precision most of the job's GEMM time ran in (its trace), used when the card has
    no peak for the default dtype; ``sm_count``: the SMs of a MIG instance, to scale the parent's peak;
    ``main``: the main process (the step view's), whose step was counted."""
    measured, _ = measured_flops(run, main)
    analytic, source = None, None
    if opts.flops_per_step:
        analytic, source = float(opts.flops_per_step), "given by the user (--flops-per-step)"
    elif opts.params and tokens_per_step:
        analytic = 6.0 * opts.params * tokens_per_step
        source = f"6·N·tokens with N={opts.params:.3g} parameters and {tokens_per_step:,.0f} tokens/step"
    flops = analytic if analytic is not None else measured
    if analytic is None and measured is not None:
        source = "measured once with torch FlopCounterMode on a real step (includes any recomputation)"
    peak: Peak | None
    if opts.peak_tflops:
        peak = Peak(model=gpu_name or "user-given", dtype=opts.peak_dtype, tflops=float(opts.peak_tflops),
                    source="given by the user (--peak-tflops)")
    else:
        peak = lookup_peak(gpu_name, opts.peak_dtype, sm_count)
    dtype_note = ""
    if (peak is None and not opts.peak_tflops and opts.peak_dtype == MfuOptions.peak_dtype and job_dtype
            and job_dtype != opts.peak_dtype):
        peak = lookup_peak(gpu_name, job_dtype, sm_count)
        if peak is not None:
            dtype_note = (f"; the card has no {opts.peak_dtype} peak, so the job's own GEMM dtype ({job_dtype}, "
                          "from its profiler trace) is used")
    dtype = peak.dtype if peak else opts.peak_dtype
    convention = (f"MFU = model FLOPs per step ÷ steady step time ÷ dense {dtype} peak per GPU"
                  + (f" ({peak.model}: {peak.tflops:.4g} TFLOP/s, {peak.source})" if peak else "") + dtype_note)
    why = None
    if flops is None:
        skipped = flops_skipped(run, main)
        why = (f"FLOPs not counted: {skipped} — pass --flops-per-step, or --params N for transformers logging "
               "tokens" if skipped else
               "no FLOP count: the hook measures one step when torch is present; otherwise pass "
               "--flops-per-step, or --params N for transformers logging tokens")
    elif not step_time_s:
        why = "no steady step time"
    elif peak is None:
        has = peak_dtypes(gpu_name)
        why = ((f"no dense {opts.peak_dtype} peak known for {gpu_name!r}"
                + (f" (the table has {', '.join(has)}: pass --peak-dtype, or record a profiler trace so the "
                   "job's own dtype is used)" if has else "")) if gpu_name else
               "MFU is not defined on a CPU unless a peak is given (--peak-tflops)")
    achieved = flops / step_time_s / 1e12 if flops and step_time_s else None
    mfu = achieved / peak.tflops if achieved is not None and peak else None
    hfu = None
    if analytic is not None and measured is not None and step_time_s and peak:
        hfu = measured / step_time_s / 1e12 / peak.tflops
    return Mfu(mfu=mfu, hfu=hfu, flops_per_step=flops, flops_source=source, achieved_tflops=achieved,
               peak=peak, gpus=gpus, convention=convention, sm_clock_ratio=sm_clock_ratio, why_not=why)
