"""Batch size and device memory: per-step fixed overhead that a larger batch amortizes (§6 E1, §7 N5 in
training form) and memory near capacity (§6 E2).

Per-step overhead: the optimizer update (and ``zero_grad``) costs the same whatever the batch size, because
it touches every parameter once per step. When it is a large share of the step, samples are processed in
batches too small to amortize it — on a GPU and on a CPU alike. The hook times ``optimizer.step()`` in
every step, so the evidence exists without a GPU. Model: step = a + r with a the optimizer time and r the
rest (forward, backward, loss), taken as linear in the batch; a batch ``k×`` larger costs a + k·r for k×
the samples. k is the smallest power of two bringing a below 10 % of the step, at most 16 (and within the
memory headroom when GPU memory is known). The linear-r assumption makes this a *lower* bound when r
itself carries per-op overhead (small models).

Memory capacity: peak device memory ≥ 90 % of the device (PyTorch TensorBoard plugin's threshold).
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import gain_from_seconds, no_gpu, no_steps
from gpusleuth.diagnosis.rules._scope import per_gpu, the_gpu

OVERHEAD_MODERATE = 0.45  # below this, Adam on a mid-size model at batch 64 (a normal job) would fire
OVERHEAD_HIGH = 0.50
TARGET = 0.10
MAX_K = 16
CAPACITY = 0.90


def _k(a: float, r: float, cap: int) -> int:
    k = 2
    while k < cap and a / (a + k * r) > TARGET:
        k *= 2
    return min(k, cap)


def step_overhead(facts: Facts) -> list[Finding] | Missing:
    s = facts.outcomes.steps
    if not s.steps:
        return no_steps("per-step overhead / batch size", "batch.too_small")
    if s.optimizer_p50_s is not None and s.body_p50_s:
        # the typical steady step: sums let a few preempted optimizer steps (a shared host) or the first
        # step's lazy optimizer state make a 0.15 ms update read 0.83 ms, "51 % of the step", HIGH ×4.5
        a, body_step = s.optimizer_p50_s, s.body_p50_s
    else:
        a, body_step = s.optimizer_s / s.steps, (s.step_time_s - s.data_wait_s) / s.steps
    if body_step <= 0 or a <= 0:
        return []
    if 2 * s.reevaluated_steps >= s.steps:
        # the optimizer evaluates its closure several times a step (LBFGS: a line search over the loss, and its
        # two-loop recursion over the history): its time is the algorithm, run on the full batch it needs, not a
        # per-batch overhead a larger batch amortizes. time_sequence_prediction's LBFGS read "HIGH, x4.5-8.2" here
        return []
    share = a / body_step
    if share < OVERHEAD_MODERATE:
        return []
    body = body_step * s.steps
    r = max(body_step - a, 1e-9)
    cap = MAX_K
    mem = [g.mem_used_share_max for g in facts.gpus if g.mem_used_share_max]
    if mem:
        cap = max(1, min(cap, int(0.8 / max(mem))))
        cap = 1 << (cap.bit_length() - 1)
    if cap < 2:
        return []
    k = _k(a, r, cap)
    # lower bound: r ∝ batch; upper bound: the whole step is per-step overhead (k× the samples for the
    # same step time). Small batches sit between (r carries per-op overhead too): geometric mean of the two.
    low = (a + r) * k / (a + k * r)
    speedup = (low * k) ** 0.5
    after_per_sample = (a + r) / speedup
    saved = (body / s.steps - after_per_sample) * s.steps
    batch = round(s.samples / s.steps) if s.samples else None
    gain = gain_from_seconds(facts, saved,
                             f"step = optimizer {a * 1e3:.2f} ms (fixed) + rest {r * 1e3:.2f} ms (∝ batch); ×{k} "
                             f"batch: {a * 1e3:.2f} + {k}×{r * 1e3:.2f} ms for {k}× the samples → ≥ {low:.2f}× (lower bound); "
                             f"≤ {k}× if the whole step is overhead; estimate = geometric mean {speedup:.2f}×")
    return [Finding(
        cause="batch.too_small",
        severity="high" if share >= OVERHEAD_HIGH else "moderate",
        title=f"Batches too small: the fixed per-step optimizer update is {share:.0%} of each step",
        summary=(f"optimizer.step() took {a * 1e3:.2f} ms per step whatever the batch"
                 + (f" (batch {batch})" if batch else "")
                 + f", against {r * 1e3:.2f} ms for the forward/backward work that scales with it: most of the "
                   "step is overhead paid once per batch."),
        evidence=[Evidence("optimizer time", round(share * 100, 1), "% of step (excl. data wait)", "hook: optimizer.step()"),
                  Evidence("optimizer per step", round(a * 1e3, 3), "ms", "hook"),
                  Evidence("rest of step", round(r * 1e3, 3), "ms", "step instrumentation"),
                  Evidence("samples per step", batch, "", "hook: batch sizes")],
        fix=(f"Raise the batch size {k}× (DataLoader(batch_size=…×{k})). Scale the learning rate with care "
             "(linear scaling + warm-up; very large batches can hurt generalization); to keep the optimizer's "
             f"effective batch, use gradient accumulation only if the optimizer step is not the cost. Also: "
             "`foreach=True`/`fused=True` optimizers and `zero_grad(set_to_none=True)`."),
        estimated_gain=gain,
        confidence="medium",
    )]


@per_gpu
def memory_capacity(facts: Facts) -> list[Finding] | Missing:
    g = the_gpu(facts)
    if g is None:
        return no_gpu("memory near capacity", facts, "memory.capacity")
    share = g.mem_used_share_max
    if share is None or share < CAPACITY:
        return []
    return [Finding(
        cause="memory.capacity", severity="moderate",
        title=f"GPU {g.index} memory peaked at {share:.0%} of the device",
        summary=("Near-full device memory makes the caching allocator free and re-allocate (cudaMalloc "
                 "stalls), fragments memory and risks out-of-memory on a longer sequence or batch."),
        evidence=[Evidence("peak memory used", round(share * 100, 1), "% of device", "NVML memory info")],
        fix=("Activation checkpointing (`torch.utils.checkpoint`), bf16 autocast (halves activations), "
             "`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, or a smaller micro-batch with gradient "
             "accumulation."),
        estimated_gain=None, confidence="medium",
    )]
