"""Host-side rules: CPU oversubscription and cgroup throttling (``contention``), and steps dominated by
Python / framework overhead (``host.python``).

Contention (catalogue §7 N9, §6 B7): the job asks for more runnable threads than the machine has cores —
``torch`` intra-op threads in the training process plus busy DataLoader workers. OpenMP pools that share
cores with other busy processes spin and wait at every parallel-region barrier, so each op's latency is
set by the slowest descheduled thread. Evidence is configuration — thread counts the hook reports, and
torch threads beyond the cores the busy loader workers leave free — never timing alone; host CPU is shown
but not required: libgomp's waiting threads sleep at barriers, so an oversubscribed job can be slow with
the host well short of 100 %. cgroup throttling comes from ``cpu.stat``.

Python overhead (§6 C2, C8; §7 N8): from a profiler trace, the calls a Python loop issues — one body of
ops run ≥ 16 times back to back in a step — and what vectorizing that loop removes from the step (their
dispatch and the Python issuing them; ``analysis/host_ops``). A model's own repetition is not such a loop:
its layers and gradient accumulation's micro-batches issue the same ops many times a step, but no rewrite
of the step's Python issues them less often.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts, HostOps
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing, Severity
from gpusleuth.diagnosis.rules._common import step_idle, gain_from_seconds, host_cpu_p50, no_steps, no_trace
from gpusleuth.diagnosis.rules._scope import per_rank, rank_host_ops, rank_trace

OVERSUB_MODERATE = 1.5  # runnable threads ÷ cores
OVERSUB_HIGH = 2.0
# Empirical share of the oversubscribed fraction of compute that is lost. Measured on 2 cores (libgomp,
# one busy loader worker, 8 torch threads vs the fixed count): 0.24 for a 3-layer 1024-wide MLP (few long
# parallel regions), 0.69 for a 6-layer 256-wide one (many short ones); the loss grows with the number of
# barriers per step, which telemetry alone cannot count. 0.45 sits between; confidence stays low.
OVERSUB_LOSS = 0.45
CGROUP_MODERATE = 0.10  # share of cgroup CPU periods throttled
CGROUP_HIGH = 0.30
#: calls per step from a loop (one body of ops issued ≥ ``repeat`` times back to back, host_ops): hundreds is
#: a per-row loop
LOOPED_OPS_PER_STEP = 100
# Shares of step time a loop rewrite removes (``host_ops`` removable share: the looped calls and the Python
# issuing them, nothing else), with the input rule's scale (a fifth of the step is high): the share is of
# what the named fix removes, no longer of all short ops and all Python between ops (the former 30 % / 50 %
# gates applied to that broader sum). A real per-row loss loop measured 23–34 % here (its vectorized twin
# ran ×1.65–2.3 faster outside the profiler on a loaded host); ResNet-18 2 %, Lightning's autoencoder 2 %.
HOST_OVERHEAD_MODERATE = 0.15
HOST_OVERHEAD_HIGH = 0.25
FLOOR = 0.05  # a vectorized step still issues its ops once: never predict it below 5 % of today's step


def _demand(facts: Facts) -> tuple[float, float, int] | None:
    """(runnable threads the job asks for, of which loader-worker cores, torch threads); None when the hook
    did not report torch's thread count."""
    t = facts.threads
    if t.torch_threads is None:
        return None
    return t.torch_threads + t.worker_cpu_cores, t.worker_cpu_cores, t.torch_threads


def oversubscription(facts: Facts) -> list[Finding] | Missing:
    s = facts.outcomes.steps
    if not s.steps:
        return no_steps("CPU oversubscription", "contention")
    cores = facts.logical_cores or (facts.host.logical_cores if facts.host else None)
    asked = _demand(facts)
    if cores is None or asked is None:
        return Missing(rule="CPU oversubscription", cause="contention",
                       needs="torch intra-op thread count and core count",
                       how="record the job with `gpusleuth run` (the hook reports torch.get_num_threads() "
                           "when a DataLoader starts)", data="host telemetry of a recording")
    demand, workers_cores, torch_threads = asked
    ratio = demand / cores
    host_cpu = host_cpu_p50(facts)
    free = max(cores - workers_cores, 0.5)
    if ratio < OVERSUB_MODERATE or torch_threads <= free:
        return []
    severity: Severity = "high" if ratio >= OVERSUB_HIGH else "moderate"
    fit = max(1, int(round(cores - workers_cores)))
    # Prediction (empirical, low confidence): threads beyond the free cores preempt each other at parallel-op
    # barriers and OVERSUB_LOSS of the oversubscribed fraction of compute is lost (calibration above).
    # Stated as such in ``method``.
    step = facts.step_mean_s
    compute = max(step - s.data_wait_s / s.steps, 0.0)
    over = max(0.0, 1 - free / torch_threads)
    saved = compute * over * OVERSUB_LOSS * s.steps
    gain = gain_from_seconds(
        facts, saved,
        f"{OVERSUB_LOSS:.0%} of the oversubscribed fraction ({over:.0%}: {torch_threads} threads on {free:.1f} "
        f"free cores) of compute ({compute * 1e3:.1f} ms/step) is lost to preemption at barriers (empirical)",
    )
    return [Finding(
        cause="contention",
        severity=severity,
        title=f"CPU oversubscribed: {demand:.1f} runnable threads on {cores} cores",
        summary=(f"The training process runs {torch_threads} torch intra-op threads while DataLoader workers "
                 f"use {workers_cores:.1f} cores, on a {cores}-core machine"
                 + (f" whose CPU sat at {host_cpu:.0f}% during the steps" if host_cpu is not None else "")
                 + ". Threads that share cores wait on each other at every parallel op."),
        evidence=[
            Evidence("torch intra-op threads", torch_threads, "", "torch.get_num_threads() (hook)"),
            Evidence("DataLoader worker CPU (sum)", round(workers_cores, 2), "cores", "process sampler"),
            Evidence("logical cores", cores, "", "host info"),
            Evidence("runnable threads ÷ cores", round(ratio, 2), "×", "derived"),
            Evidence("host CPU during the steps (median)", None if host_cpu is None else round(host_cpu, 1), "%",
                     "host sampler"),
            Evidence("training process peak OS threads", facts.threads.main_os_threads, "", "process sampler"),
        ],
        fix=(f"torch.set_num_threads({fit})  # cores − busy loader workers; or OMP_NUM_THREADS={fit}\n"
             "Keep DataLoader num_workers + intra-op threads ≤ cores; set worker threads to 1 in "
             "worker_init_fn (`torch.set_num_threads(1)`), and pin processes apart (taskset) on shared hosts."),
        estimated_gain=gain,
        confidence="low",
    )]


def cgroup_throttling(facts: Facts) -> list[Finding] | Missing:
    h = facts.host
    if h is None or h.cgroup_throttled_share is None:
        return Missing(rule="container CPU throttling", cause="contention",
                       needs="cgroup cpu.stat counters (the job was not in a CPU-limited cgroup, or none were read)",
                       how="nothing to do outside a container with a CPU limit; inside one, `gpusleuth run` reads cpu.stat",
                       data="cgroup CPU counters")
    share = h.cgroup_throttled_share
    if share < CGROUP_MODERATE or not facts.outcomes.steps.steps:
        return []
    s = facts.outcomes.steps
    saved = share * (s.step_time_s - s.data_wait_s) * 0.5
    return [Finding(
        cause="contention",
        severity="high" if share >= CGROUP_HIGH else "moderate",
        title=f"Container CPU quota throttled {share:.0%} of scheduling periods",
        summary=("The job's cgroup hit its CPU quota (cpu.max) in many periods: its threads were stopped until "
                 "the next period regardless of free cores."),
        evidence=[Evidence("throttled periods", round(share * 100, 1), "% of cgroup periods", "cgroup cpu.stat"),
                  Evidence("host CPU (mean)", round(h.cpu_pct["mean"], 1) if h.cpu_pct else None, "%", "host sampler")],
        fix=("Raise the container's CPU limit (Kubernetes `resources.limits.cpu`, `docker --cpus`) or lower the "
             "threads the job runs (DataLoader num_workers, torch.set_num_threads) to fit the quota."),
        estimated_gain=gain_from_seconds(facts, saved, "assumes half of the throttled share of compute time is "
                                         "lost to quota stalls (periods, not time, are counted)"),
        confidence="low",
    )]


def foreign_cores(facts: Facts) -> float | None:
    """Cores used by processes outside the job while its steps ran, when they crowd a busy host; else None."""
    h = facts.host
    return h.crowded_cores(facts.logical_cores) if h is not None else None


def foreign_load(facts: Facts) -> list[Finding] | Missing:
    """Other processes on a shared host took CPU from the job while it ran.

    Nothing in the job's configuration explains this, so no other rule can name it; and it changes what the
    other findings mean: a loader starved by someone else's work is not fixed by more workers, and timings
    taken on a crowded host do not hold on a quiet one. Moderate at most: the loss cannot be priced from
    samples (it depends on how the scheduler shares the cores), so no gain is claimed."""
    h = facts.host
    if h is None or h.foreign_cores_steps is None:
        return Missing(rule="other load on the host", cause="contention",
                       needs="host CPU and the job's per-process CPU during the steps",
                       how="record the job with `gpusleuth run`", data="host telemetry of a recording")
    cores = facts.logical_cores or h.logical_cores
    foreign = foreign_cores(facts)
    if foreign is None:
        return []
    busy = h.cpu_pct_steps or h.cpu_pct
    if busy is None or h.job_cores_steps is None:  # measured whenever foreign cores are: never taken
        return []
    when = "During the training steps" if h.cpu_pct_steps else "While it ran"
    return [Finding(
        cause="contention", severity="moderate",
        title=f"Other processes used {foreign:.1f} of the host's {cores} cores while the job ran",
        summary=(f"{when} the host was {busy['p50']:.0f}% busy (median) and the job's "
                 f"own processes used {h.job_cores_steps:.1f} cores of it: the rest went to processes outside the "
                 "job. They take CPU from its loop and its loaders, so its step times and any input or host "
                 "finding measured here are pessimistic, and they vary from run to run."),
        evidence=[Evidence("cores used outside the job", round(foreign, 2), "cores", "host − job process samples"),
                  Evidence("cores used by the job", round(h.job_cores_steps, 2), "cores", "process sampler"),
                  Evidence("host CPU while it ran (median)", round(busy["p50"], 1), "%", "host sampler"),
                  Evidence("logical cores", cores, "", "host info")],
        fix=("Run on a quiet host (or reserve cores: `taskset`/cgroups, a dedicated node), then measure again "
             "before acting on input or host findings; `top -o %CPU` shows who else is running."),
        estimated_gain=None, confidence="medium",
    )]


def recurrence(facts: Facts, h: HostOps) -> Finding:
    """A loop over time steps of a recurrent cell (LSTMCell, GRUCell, RNNCell): each iteration takes the state
    the one before made, so no batched op replaces the loop, and vectorizing — the gain the loop finding
    prices — is not available. The closest rewrite, one fused ``nn.LSTM`` over the whole sequence, measured
    ×0.91-1.03 on CPU where "HIGH, ×1.34-1.43" had been predicted (an LSTMCell inside an LBFGS closure), and
    the rewritten job still read HIGH ×1.58. Named, moderate at most, no gain claimed, and why."""
    return Finding(
        cause="host.python", severity="moderate",
        title=f"Steps are a recurrence issued from Python: {h.looped_ops_per_step:.0f} op calls per step from a "
              "loop over time steps",
        summary=(f"In the profiled steps the code issued {h.ops_per_step:.0f} ops per step, "
                 f"{h.looped_ops_per_step:.0f} of them from a loop that runs a recurrent cell each iteration; "
                 f"their dispatch and the Python issuing them are {h.removable_share:.0%} of step time. Each "
                 "iteration takes the state the one before made, so the loop cannot be vectorized away, and "
                 "what a fused recurrent layer would save is not measured here."),
        evidence=[
            Evidence("top-level ops per step", round(h.ops_per_step, 1), "", f"profiler trace {h.label}"),
            Evidence("calls per step in the recurrent loop", round(h.looped_ops_per_step, 1), "", "profiler trace"),
            Evidence("their dispatch + the Python issuing them", round(h.removable_share * 100, 1),
                     "% of step time", "profiler trace"),
            Evidence("recurrent cell in the loop body", "aten::lstm_cell / gru_cell / rnn_*_cell", "",
                     "profiler trace op names"),
        ],
        fix=("If the whole sequence is known before the loop (teacher forcing), run one `nn.LSTM`/`nn.GRU`/"
             "`nn.RNN` over it instead of the cell per time step (cuDNN fuses the time steps on a GPU; on a CPU "
             "the fused layer measured ×0.91-1.03, so measure before committing to it); otherwise "
             "`torch.compile` the cell's step function to cut per-op dispatch."),
        estimated_gain=None,
        confidence="low",
    )


@per_rank
def python_overhead(facts: Facts) -> list[Finding] | Missing:
    """Steps spent issuing ops from a Python loop (§6 C2, C8): priced by what vectorizing that loop removes —
    the looped calls' dispatch and the interpreter time before each — never by all short ops or all Python
    between ops: a model's layers, its optimizer and a framework's per-step hooks (Lightning's logging and
    progress bar) are issued once a step, and no rewrite of the user's loops issues them less often.

    A loop is one body of ops issued ≥ 16 times back to back (``host_ops.loop_iterations``), not an op
    issued ≥ 16 times anywhere in the step: that count read nanoGPT's 2 blocks × 2 micro-batches (each
    block's ``linear`` 18 times a step) as "411 looped calls, 26 % of the step, HIGH", and a 24-layer stack
    of small Linear+ReLU blocks as 80 %, HIGH. Micro-batches (a forward and a backward each iteration) and
    layers (each iteration's backward accumulates into its own parameters) are the model's structure; a
    per-row loop over 64 rows keeps its finding. Forward only (inference), the ops' recorded arguments tell
    layers (the same shapes and scalars every iteration) from a loop over rows (an index that walks, or a
    tensor's rows as the count): Qwen1.5-0.5B's 24 decoder layers on an H100 read 1,352 looped calls, now
    0. Without recorded shapes a forward-only stack of ≥ 16 layers still reads as a loop, so a forward-only
    step without them is at most moderate, low confidence, and says why (24 inference layers under
    torch.no_grad read "HIGH, 97 % removable")."""
    h = rank_host_ops(facts)
    if h is None:
        return no_trace("Python / framework overhead", "host.python",
                        "a profiler trace of a few steps (ops per step, time between ops)")
    s = facts.outcomes.steps
    overhead = h.removable_share
    if h.looped_ops_per_step < LOOPED_OPS_PER_STEP or overhead < HOST_OVERHEAD_MODERATE:
        return []
    step = facts.step_mean_s or h.step_time_median_s
    removable = min(overhead, 1 - FLOOR)
    # On an accelerator the host runs ahead of the device: Python time costs the step only where the
    # device sat idle waiting for the host (its host-bound and launch-bound idle). Bound the gain by it.
    device = rank_trace(facts)
    if device is not None:
        waiting, total = step_idle(device, ("idle_host", "idle_launch"))
        device_wait = waiting / total if total else 0.0
        if device_wait < HOST_OVERHEAD_MODERATE:
            return []  # the device is not waiting on the interpreter: nothing to gain from the host side
        overhead = min(overhead, device_wait)
        removable = min(removable, device_wait)
    saved = step * removable * s.steps if s.steps else 0.0
    gain = gain_from_seconds(
        facts, saved,
        f"vectorizing the loop removes the dispatch of its {h.looped_ops_per_step:.0f} op calls per step "
        f"({h.loop_op_share:.0%}: each call up to {h.tiny_op_threshold_us:.0f} µs, its work stays) and the "
        f"Python that issues them ({h.loop_python_share:.0%}), at most {1 - FLOOR:.0%}, from the trace's "
        "steps; ops issued a few times a step and the rest of the Python (framework hooks, logging) stay",
    )
    if h.recurrent:
        return [recurrence(facts, h)]
    # forward only and no recorded arguments: ≥ 16 identical layers look exactly like this; say so, and
    # never claim more than moderate on it (a 24-layer inference stack read "HIGH, 97 % removable")
    unproven = h.forward_only_unproven
    caveat = (" Every profiled step is forward-only (no backward) and the trace recorded no op arguments, so "
              "this repetition may be the model's own layers (an inference stack of ≥ 16 identical layers "
              "issues the same body layer after layer): profile with record_shapes=True to tell."
              if unproven else "")
    return [Finding(
        cause="host.python",
        severity="high" if overhead >= HOST_OVERHEAD_HIGH and not unproven else "moderate",
        title=(f"Steps are Python-loop overhead: {h.looped_ops_per_step:.0f} op calls per step from "
               "loops"),
        summary=(f"In the profiled steps the code issued {h.ops_per_step:.0f} ops per step "
                 f"(median {h.median_op_us:.1f} µs each), {h.looped_ops_per_step:.0f} of them the same ops "
                 f"again and again (one body of ops ≥ {h.repeat} times back to back"
                 + ("" if unproven else ": a Python loop over rows or elements, not the model's layers or "
                    "micro-batches") + "). Their "
                 f"dispatch and the Python issuing them are {h.removable_share:.0%} of step time; the "
                 "processor waits on the interpreter, not on math." + caveat),
        evidence=[
            Evidence("top-level ops per step", round(h.ops_per_step, 1), "", f"profiler trace {h.label}"),
            Evidence(f"calls per step in ≥ {h.repeat} back-to-back iterations of one body",
                     round(h.looped_ops_per_step, 1), "", "profiler trace"),
            Evidence("their dispatch + the Python issuing them", round(h.removable_share * 100, 1),
                     "% of step time", "profiler trace"),
            Evidence("Python between ops (all)", round(h.python_share * 100, 1), "% of step time",
                     "profiler trace"),
            Evidence("time in ops < 20 µs (all)", round(h.tiny_op_share * 100, 1), "% of step time",
                     "profiler trace"),
            Evidence("profiled steps", h.steps, "", "profiler trace"),
        ],
        fix=("Vectorize per-sample / per-element Python loops into batched tensor ops (e.g. one "
             "`F.cross_entropy(out, y)` instead of a loop over rows); then `model = torch.compile(model)` "
             "to fuse the remaining small ops (on a GPU, `mode=\"reduce-overhead\"` adds CUDA graphs)."),
        estimated_gain=gain,
        confidence="medium" if h.steps >= 3 and not unproven else "low",
    )]
