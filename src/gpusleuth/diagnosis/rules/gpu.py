"""GPU-side rules of the first set: the low-GPU-low-CPU quadrant and memory headroom for larger batches.

Both need NVML samples; without a GPU they say what is missing instead of guessing.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import gain_from_seconds, job_cpu_pct, no_gpu
from gpusleuth.diagnosis.rules._scope import per_gpu, the_gpu

LOW_UTIL = 50.0  # mean GPU utilization (%) below which the device is clearly under-fed
LOW_CPU = 50.0  # the job's CPU (% of one core, per rank) below which the host is not the bottleneck
HEADROOM = 0.5  # peak memory below this share of the device leaves room for a ≥2× batch
BUSY_ENOUGH = 80.0
IDLE_CARD = 5.0  # mean utilization below this: the card ran (almost) nothing


def _no_gpu(rule: str, facts: Facts, cause: str | None = None) -> Missing:
    return no_gpu(rule, facts, cause)


@per_gpu
def low_gpu_low_cpu(facts: Facts) -> list[Finding] | Missing:
    g = the_gpu(facts)
    if g is None:
        return _no_gpu("low-GPU-low-CPU", facts, "sync")
    steps = facts.outcomes.steps
    job = job_cpu_pct(facts)
    if not g.util_gpu or g.util_gpu["mean"] >= LOW_UTIL or job is None or job[0] >= LOW_CPU:
        return []
    cpu, what = job
    if steps.data_wait_share_of_steps >= 0.05:
        return []  # the input rule explains this dip better
    util = g.util_gpu["mean"]
    idle = 1 - util / 100.0
    return [
        Finding(
            cause="sync",
            severity="high" if util < 25 else "moderate",
            title=f"GPU {g.index} mostly idle while the CPU is idle too: synchronization or code",
            summary=(
                f"GPU {g.index} ran kernels {util:.0f}% of the time while {what} used "
                f"{cpu:.0f}% of a core and exposed data wait was {steps.data_wait_share_of_steps:.0%}: "
                "neither side is busy, so the program waits on something else — host-device "
                "synchronization (.item(), .cpu(), print(tensor)), sleeps, locks, or a model too "
                "small to keep the device busy."
            ),
            evidence=[
                Evidence("GPU utilization (mean)", round(util, 1), "%", "NVML utilization.gpu"),
                Evidence("GPU utilization p5/p95", f"{g.util_gpu['p5']:.0f}/{g.util_gpu['p95']:.0f}", "%", "NVML"),
                Evidence("job CPU (mean)", round(cpu, 1), "% of one core", f"process sampler: {what}"),
                Evidence("exposed data wait", round(steps.data_wait_share_of_steps * 100, 1), "% of step time",
                         "step instrumentation"),
            ],
            fix=(
                "Take a profiler trace of a few steps (`gpusleuth run --profile-steps 5-8 -- …`) to see "
                "what sits in the gaps. Remove per-step host syncs: log losses every N steps, keep "
                "metrics on device (`loss.detach()` accumulated, `.item()` once per N steps), avoid "
                "`print(tensor)`. If kernels are tiny, see batch size and CUDA graphs/torch.compile."
            ),
            estimated_gain=gain_from_seconds(
                facts, idle * 0.5 * steps.step_time_s,
                "assumes half of the idle device time is recoverable (no trace to attribute it)",
            ),
            confidence="low",
        )
    ]


@per_gpu
def memory_headroom(facts: Facts) -> list[Finding] | Missing:
    g = the_gpu(facts)
    if g is None:
        return _no_gpu("memory headroom / batch size", facts, "batch.too_small")
    share, used, total = g.mem_used_share_max, g.mem_used_max_bytes, g.mem_total_bytes
    if share is None or used is None or total is None or share >= HEADROOM:  # a share has both
        return []
    util = g.util_gpu["mean"] if g.util_gpu else None
    if util is not None and util >= BUSY_ENOUGH and not (g.sm_active and g.sm_active["mean"] < 50):
        return []
    if util is not None and util < IDLE_CARD:
        return []  # no kernels ran: there is no batch on this card to enlarge (the idle/low-GPU rules speak)
    k = max(2, int(0.8 / share)) if share > 0 else 2
    k = 1 << (k.bit_length() - 1)  # a power of two keeps shapes friendly
    return [
        Finding(
            cause="batch.too_small",
            severity="moderate",
            title=f"GPU {g.index} uses {share:.0%} of its memory: room for a {k}× larger batch",
            summary=(
                f"Peak device memory was {used / 2**30:.1f} GiB of "
                f"{total / 2**30:.1f} GiB"
                + (f" while utilization averaged {util:.0f}%" if util is not None else "")
                + ". A larger batch gives each kernel more work and amortizes per-step overhead."
            ),
            evidence=[
                Evidence("peak memory used", round(share * 100, 1), "% of device", "NVML memory info"),
                Evidence("GPU utilization (mean)", None if util is None else round(util, 1), "%", "NVML"),
            ],
            fix=(
                f"Raise the batch size about {k}× (e.g. DataLoader(batch_size=…×{k})). Scale the learning "
                "rate with care (linear scaling plus warm-up; very large batches can hurt generalization). "
                "To keep the effective batch instead, use gradient accumulation. Verify with "
                "`gpusleuth sweep`."
            ),
            estimated_gain=None,
            confidence="medium",
        )
    ]
