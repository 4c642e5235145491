"""Sizing versus stall (§7 N1): is the GPU idle because something makes it wait, or because the job is
too small for it?

A stall leaves evidence — exposed data wait, sync/launch idle in a trace, a saturated host. Sizing leaves
none: utilization or SM activity low, memory mostly free, and no stall above its threshold. Then the
answer is not micro-optimization but a bigger batch/model per GPU, sharing the card (MIG, MPS), or a
smaller, cheaper GPU. Fires when mean utilization (or SM activity when known) < 50 %, peak memory < 50 %,
exposed data wait < 5 % and the job's processes use < 90 % of a core per rank (not host-bound: its
workers' CPU counts, not only the training process's). Gain: none in
step time — the win is cost: the share of the card left unused.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import device_traces, job_cpu_pct, no_gpu, step_idle
from gpusleuth.diagnosis.rules._scope import per_gpu, the_gpu

LOW = 50.0
MEM_LOW = 0.5
HOST_BUSY = 90.0


@per_gpu
def sizing_vs_stall(facts: Facts) -> list[Finding] | Missing:
    g = the_gpu(facts)
    if g is None:
        return no_gpu("sizing vs stall", facts, "sizing")
    s = facts.outcomes.steps
    if not s.steps or s.data_wait_share_of_steps >= 0.05:
        return []
    job = job_cpu_pct(facts)
    if job is not None and job[0] >= HOST_BUSY:
        return []
    for t in device_traces(facts):
        stall, total = step_idle(t, ("idle_sync", "idle_launch", "idle_kernel_gap", "idle_data_loader", "idle_host"))
        if total and stall / total >= 0.15:
            return []
    activity = g.sm_active["mean"] if g.sm_active else (g.util_gpu["mean"] if g.util_gpu else None)
    mem = g.mem_used_share_max
    if activity is None or activity >= LOW or mem is None or mem >= MEM_LOW:
        return []
    return [Finding(
        cause="sizing", severity="moderate",
        title=f"GPU {g.index} is too big for this job: {activity:.0f}% active, {mem:.0%} memory, no stall",
        summary=("Nothing makes the device wait (no data wait, no host saturation, no sync/launch stall "
                 "in a trace): the work per step is simply small for this card."),
        evidence=[Evidence("SM active" if g.sm_active else "utilization.gpu", round(activity, 1), "% (mean)", "NVML"),
                  Evidence("peak memory", round(mem * 100, 1), "% of device", "NVML"),
                  Evidence("exposed data wait", round(s.data_wait_share_of_steps * 100, 1), "% of step", "hook"),
                  Evidence("job CPU (mean)", None if job is None else round(job[0], 1), "% of a core",
                           f"process sampler: {job[1]}" if job else "process sampler")],
        fix=("Right-size: raise the per-GPU batch (learning-rate care) or run several jobs per card "
             "(MIG partitions on A100/H100, or MPS); or move the job to a smaller, cheaper GPU. Don't "
             "micro-optimize kernels first."),
        estimated_gain=None, confidence="medium",
    )]
