"""Busy-but-idle (§7 N2): ``nvidia-smi`` utilization high while the device does little real work.

NVML's utilization.gpu counts the share of time *any* kernel ran: one tiny kernel, or an NCCL kernel
spinning on a peer, reads as 100 %. Real work shows in SM activity / tensor activity (GPM on Hopper+,
DCGM profiling fields) and in power draw. Fires when utilization averages ≥ 80 % and SM activity
averages < 40 %, or (without GPM) power averages < 40 % of the card's limit. No gain estimate: the fix
(bigger kernels, fusion, batch) has to be measured; the finding explains what the 99 % really means.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import no_gpu
from gpusleuth.diagnosis.rules._scope import per_gpu, the_gpu

BUSY = 80.0
SM_LOW = 40.0
POWER_LOW = 0.40


@per_gpu
def busy_but_idle(facts: Facts) -> list[Finding] | Missing:
    g = the_gpu(facts)
    if g is None:
        return no_gpu("busy-but-idle (utilization vs real activity)", facts, "sizing")
    limits = {h.get("index", i): h.get("power_limit_w") for i, h in enumerate(facts.gpu_hw)}
    if not g.util_gpu or g.util_gpu["mean"] < BUSY:
        return []
    sm = g.sm_active["mean"] if g.sm_active else None
    limit = limits.get(g.index)
    power = g.power_w["mean"] if g.power_w else None
    low_power = power is not None and limit and power / limit < POWER_LOW
    if not ((sm is not None and sm < SM_LOW) or (sm is None and low_power)):
        return []
    tensor = g.tensor_active["mean"] if g.tensor_active else None
    return [Finding(
        cause="sizing", severity="moderate",
        title=f"GPU {g.index} reads {g.util_gpu['mean']:.0f}% utilized but does little work",
        summary=("Utilization only says a kernel was running; "
                 + (f"SMs were active {sm:.0f}% of the time" if sm is not None else
                    f"power averaged {power:.0f} W of a {limit:.0f} W limit")
                 + ": kernels too small to fill the device, a single latency-bound stream, or communication "
                   "kernels spinning on peers."),
        evidence=[Evidence("utilization.gpu (mean)", round(g.util_gpu["mean"], 1), "%", "NVML"),
                  Evidence("SM active (mean)", None if sm is None else round(sm, 1), "%", "NVML GPM / DCGM"),
                  Evidence("tensor active (mean)", None if tensor is None else round(tensor, 1), "%", "NVML GPM"),
                  Evidence("power (mean) / limit", f"{power or 0:.0f} / {limit or 0:.0f}", "W", "NVML")],
        fix=("Give each kernel more work: a larger batch, fused ops (`torch.compile`), bf16 autocast for "
             "Tensor Cores. If the model is simply small for this card, share it (MIG / MPS) or use a "
             "smaller GPU."),
        estimated_gain=None, confidence="medium",
        missing=[] if sm is not None else ["SM activity (GPM, Hopper+ or DCGM profiling) — judged on power"],
    )]
