"""Input-pipeline rules: is the training loop waiting on its data, and is that CPU work or latency?

Severity follows the exposed data wait's share of step time: ≥ 5 % moderate, ≥ 20 % high (the
thresholds of XProf's input-pipeline analysis and the PyTorch TensorBoard plugin's DataLoader advice).
The split between preprocessing and I/O comes from CPU evidence: with ``num_workers=0`` the main
thread's own CPU time inside the waits (busy → it was transforming; idle → it was waiting on storage);
with workers, how busy the worker processes were — and the training thread's own CPU inside its waits, which
with workers is the hand-over of each batch (``input.handover`` when it is most of the wait: more workers
cannot shorten it, and a latency prediction keeps it in the step it predicts).
"""

from __future__ import annotations

import math

from gpusleuth.diagnosis.facts import Facts, LoaderConfig
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing, Severity
from gpusleuth.diagnosis.rules.host import foreign_cores
from gpusleuth.diagnosis.rules._common import (COPY_SHARE, copy_bound_speaks, device_copies,
                                               gain_from_seconds, host_cpu_p50, no_device_trace, no_steps,
                                               run_seconds, step_idle)
from gpusleuth.diagnosis.rules._scope import per_rank, rank_trace
from gpusleuth.diagnosis.rules._framework import inline_loading_fix, loader_fix

# Without a DataLoader the input wait is the pre-forward gap (docs/run-format.md, steps.wait_source): the
# fix is to take batch creation off the training thread, which a DataLoader over the same code does.
NO_LOADER_FIX = ("Your loop builds each batch itself before the forward (no DataLoader): move that code into "
                 "an `IterableDataset` whose `__iter__` yields batches and iterate "
                 "`{loader}` instead, so workers prepare the next batches while the model trains (or prefetch "
                 "the next batch in a background thread).")

# What loading made cheap is worth: the wait removed, the step the compute measured beside the loading. Not an
# upper bound: the loading slows the compute it shares a core with (caches, allocator), and that comes back too
# — cached samples measured ×5.0-7.1 by the scripts' clocks where this predicted ×2.9-4.6 for the steps
# (pytorch/examples' VAE and MNIST LSTM, Lightning's autoencoder and backbone; benchmarks/fixes_applied.py)
CHEAP_NOTE = (" if the loading then costs nothing (the compute was measured beside the loading, which also slows "
              "it: cached samples have measured more than this)")

MODERATE = 0.05
HIGH = 0.20
BUSY = 0.3  # main-thread CPU ÷ wait at or above this: the main thread is doing the loading itself.
# A sleeping or storage-bound loader measures ~0–10 %; CPU-bound loading stays above 30 % even when two
# busy processes share each core, which is common on small machines.
WORKERS_SATURATED_PCT = 80.0  # a worker this busy (% of one core) is CPU-bound
WORKERS_IDLE_PCT = 50.0
HOST_SATURATED_PCT = 95.0  # host CPU (all cores, during the steps) at which an idle-looking loader is starved
BUSY_STARVED = 0.10  # on a saturated host, a loading thread with this much CPU is computing, not sleeping
# With workers, the training thread on a CPU for at least half of its wait: it was receiving batches (the
# hand-over), not waiting for a worker. Measured on scenarios/io_workers.py (2 cores, 15 ms reads): with 1
# worker the thread is on a CPU for 9-14 % of its wait (it waits for the reads); with 2, 4 or 8 workers the
# wait stays at 17-19 % of the step whatever the count, and the thread is on a CPU for 53-70 % of it —
# `pickle.loads` rebuilding each tensor through a socket hand-shake with the worker (~2 ms a batch of two
# tensors; `torch.multiprocessing.set_sharing_strategy("file_system")` took it to ~0.8 ms).
HANDOVER = 0.5
WORKERS_WANT = 0.5  # loader workers running or runnable this share of the time: CPU work, starved or not
# The loading processes read less than this from storage a step (/proc/PID/io read_bytes): storage is not
# what they wait on. And less than this through any read call (rchar: files, page cache, sockets, pipes — the
# workers' index queue is a few hundred bytes a batch): the data is in memory, nothing is read at all.
NO_STORAGE_BYTES = 4096
IN_MEMORY_CHARS = 16 * 1024
# ... and the training thread on a CPU for at least this share of its wait (receiving batches): the hand-over
# is the wait. A loader whose workers sleep leaves it idle: 1 % (tests/test_end_to_end.py's sleeping loader),
# 9-14 % (scenarios/io_workers.py, 1 worker on 15 ms reads); the in-memory case 34-48 %.
IN_MEMORY_HANDOVER = 0.2


def _wait_cpu_demand(demand: float | None, share: float) -> float | None:
    """The least share of its input wait the training thread wanted a CPU (ran, or waited runnable for one).

    The schedstat clocks say how much of the steps' time the main thread wanted a CPU (D), not when; the rest
    of the step (1 − share) can at most have wanted one all along, so the wait wanted at least
    (D − (1 − share)) ÷ share. A lower bound: a GPU job's thread blocked in a sync outside the wait lowers it,
    never raises it. Measured on the demo's planted loader (CPU transform in the training thread, 2 cores,
    burners on 1.5 of them): its CPU was 16-30 % of the wait (read as storage) while it wanted a CPU ≥ 99 % of
    it; a loader sleeping on storage beside the same burners, ≥ 12 % (its thread wanted a CPU 51 % of the steps'
    time, waiting 55 % of it)."""
    if demand is None or share <= 0:
        return None
    share = min(share, 1.0)
    return max(min((demand - (1.0 - share)) / share, 1.0), 0.0)


MIN_FREE_CORES = 0.25  # less than a quarter of a core free: another worker would only take the loop's CPU


def free_worker_cores(facts: Facts, usable_cores: float) -> tuple[float, str]:
    """(cores loader workers can run on beside the training loop, how that was measured): the cores the job
    may use (the host's, its cgroup's cpu.max quota, its affinity), less what processes outside the job used
    while the steps ran, less one for the training loop. A prediction that assumes a free core fails on a
    shared host: the demo predicted ×1.64 and measured ×1.03 with other processes on 1.0–1.6 of 2 cores."""
    h = facts.host
    foreign = h.foreign_cores_steps if h is not None and h.foreign_cores_steps is not None else 0.0
    limit = (f"cgroup/affinity limit {facts.cpu_limit_cores:.1f}" if facts.cpu_limit_cores is not None
             and facts.cpu_limit_cores < (facts.logical_cores or float("inf")) else f"{usable_cores:g} cores")
    loop, why = training_loop_cores(facts, usable_cores)
    free = max(usable_cores - foreign - loop, 0.0)
    return free, f"{limit} − {foreign:.1f} used by other processes − {loop:g} for the training loop{why}"


def training_loop_cores(facts: Facts, usable_cores: float) -> tuple[float, str]:
    """Cores the training loop itself holds while it computes. A GPU job's loop is one Python thread
    launching kernels; a job that computes on the CPU (no GPU telemetry) runs torch's intra-op threads on
    every core they are given, so a loader worker added there takes its CPU from the compute. Measured on the
    field corpus's MNIST CNN (2 cores, torch's 2 threads): one worker removed the 30 ms data wait and the
    step got no faster (×0.88–1.00 where "1 core free" predicted ×1.33)."""
    s = facts.outcomes.steps
    # trainer processes side by side (Hogwild) each hold their loop's cores on this one host
    loops = len(s.ranks) if s.workers == "trainers" and s.ranks else 1
    each = " each" if loops > 1 else ""
    torch_threads = facts.threads.torch_threads
    if facts.gpus or not torch_threads or torch_threads <= 1:
        return float(min(loops, usable_cores)), (f" ({loops} trainer processes)" if loops > 1 else "")
    loop = float(min(torch_threads * loops, usable_cores))
    return loop, (f" ({loops} trainer processes," if loops > 1 else " (") + (
        f" its{each} {torch_threads} torch intra-op threads: the compute runs on the CPU)")


def training_loader(facts: Facts) -> LoaderConfig | None:
    """The DataLoader config of the training loop: the main process's first loader."""
    main = facts.outcomes.steps.pid
    for info in facts.dataloaders:
        if main is None or info.get("pid") == main:
            return info
    return facts.dataloaders[0] if facts.dataloaders else None


def input_bound(facts: Facts) -> list[Finding] | Missing:
    s = facts.outcomes.steps
    if not s.steps:
        return no_steps("input-bound", "input.preprocessing")
    if s.data_wait_measured_steps == 0:
        return Missing(rule="input-bound", needs="the steps' input wait (no DataLoader fetch and no module "
                       "forward was seen in any step)", how="iterate your batches through "
                       "`gpusleuth.watch(batches)` or a DataLoader", cause="input.preprocessing")
    # Steady state: leave out the first step when there are enough, since it carries the loader workers'
    # start-up (fork, imports, first prefetch) — a one-off cost per epoch that no worker count removes.
    first = facts.first_step if s.steps >= 5 else {}
    # ... and the steps gpusleuth's own profiler or FLOP counter slowed: their gaps hold our work, not input
    slowed = s.instrumented_steps if s.steps - s.instrumented_steps - (1 if first else 0) >= 3 else 0
    n_steps = s.steps - (1 if first else 0) - slowed
    wait_s = s.data_wait_s - first.get("data_wait_s", 0.0) - (s.instrumented_wait_s if slowed else 0.0)
    cpu_s = s.data_cpu_s - first.get("data_cpu_s", 0.0) - (s.instrumented_cpu_s if slowed else 0.0)
    body_s = s.step_time_s - first.get("duration_s", 0.0) - (s.instrumented_s if slowed else 0.0)
    share = wait_s / body_s if body_s > 0 else 0.0
    if share < MODERATE:
        return []
    # the loop's input is its DataLoader only where its steps fetch from one: a loader read once (a fixed batch
    # reused by every step) makes the waits the pre-forward gap's, and "waited on its DataLoader" untrue
    fed = s.fetching_steps is None or 2 * s.fetching_steps >= s.steps
    loader = training_loader(facts) if fed else None
    # the cause rests on the typical step: a mean that a few long waits carry (workers started again at each
    # epoch, an evaluation loader's fetches the steps hold) says nothing about storage or CPU
    typical = max(wait_s - s.data_wait_spike_s, 0.0) / body_s if body_s > 0 else 0.0
    if typical < MODERATE and s.data_wait_spike_steps:
        return spike_steps(facts, loader, share, typical, body_s)
    severity: Severity = "high" if typical >= HIGH else "moderate"
    workers = loader.get("num_workers") if loader else None
    what = "its DataLoader" if loader else "its input (no DataLoader: the time from a step's end to the next forward)"
    cpu_source = ("thread CPU clock around DataLoader fetches" if loader else
                  "thread CPU clock from a step's end to the next forward")
    cores = facts.logical_cores or 1
    step_mean = body_s / n_steps
    wait_mean = wait_s / n_steps
    compute_mean = max(step_mean - wait_mean, 0.0)
    host = facts.host
    evidence = [
        Evidence("exposed data wait", round(share * 100, 1), "% of step time", "step instrumentation"),
        Evidence("data wait per step", round(wait_mean * 1e3, 2), "ms", "step instrumentation"),
        Evidence("rest of step (compute)", round(compute_mean * 1e3, 2), "ms", "step instrumentation"),
    ]
    if first:
        evidence.append(Evidence("first step's data wait (start-up, left out)", round(first.get("data_wait_s", 0.0) * 1e3, 1),
                                 "ms", "step instrumentation"))
    if workers is not None:
        evidence.append(Evidence("DataLoader num_workers", workers, "", "DataLoader seen at run time"))

    # --- preprocessing (CPU) or I/O (latency)? ---
    # On a host crowded by processes outside the job, the CPU a loader got says little about the work it had:
    # no "host saturated, so CPU-bound" inference, and the severity stays moderate (foreign_load says why).
    # What the threads *wanted* does (their schedstat clocks: running, or runnable and waiting for a CPU), on
    # any host: a loader starved by others' load wants a CPU; one waiting on storage wants none.
    foreign = foreign_cores(facts)
    if foreign is not None:
        severity = "moderate"
        evidence.append(Evidence("cores used outside the job during the steps", round(foreign, 2), "cores",
                                 "host − job process samples"))
    busy_ratio = cpu_s / wait_s if wait_s > 0 else 0.0
    worker_cpu = host.worker_cpu_pct_mean if host else None
    kind = None
    starved = False  # the split came from what the threads wanted (schedstat), not what they got
    handover_mean = 0.0  # the training thread's own receiving of batches from workers, per step
    if workers == 0 or (workers is None and worker_cpu is None):
        evidence.append(
            Evidence("main-thread CPU while waiting", round(busy_ratio * 100, 1), "% of the wait", cpu_source)
        )
        kind = "input.preprocessing" if busy_ratio >= BUSY else "input.io"
        host_cpu = host_cpu_p50(facts)
        if kind == "input.io" and busy_ratio >= BUSY_STARVED and host_cpu is not None and \
                host_cpu >= HOST_SATURATED_PCT and foreign is None:
            kind = "input.preprocessing"  # a CPU-bound loader on a saturated host gets only a slice of a core
            evidence.append(Evidence("host CPU (median)", round(host_cpu, 1), "% — loading starved of CPU", "host sampler"))
        wanted = _wait_cpu_demand(host.main_cpu_demand if host else None, share)
        if wanted is not None and host is not None and (kind == "input.preprocessing" or wanted >= BUSY):
            evidence.append(Evidence(
                "main thread wanting a CPU during the wait (at least)", round(wanted * 100, 1),
                f"% of the wait; runnable but waiting for a CPU {100 * (host.main_run_delay_share or 0.0):.0f} % "
                "of the steps' time", "schedstat: main thread run + run delay"))
            if kind == "input.io":
                kind = "input.preprocessing"  # the loading is CPU work that got too little CPU: starved
                starved = True
        prep_cpu_per_step = cpu_s / n_steps
    else:
        # With workers, the training thread's CPU inside its waits is its share of the loading: receiving each
        # batch from a worker (unpickling, the shared-memory hand-shake per tensor). More workers cannot hide it.
        handover_mean = cpu_s / n_steps
        evidence.append(Evidence("training thread on a CPU while waiting (receiving batches)",
                                 round(handover_mean * 1e3, 2), f"ms per step, {busy_ratio:.0%} of the wait",
                                 cpu_source))
        if worker_cpu is not None:
            evidence.append(Evidence("loader worker CPU (mean)", round(worker_cpu, 1), "% of one core",
                                     "process sampler"))
            kind = "input.preprocessing" if worker_cpu >= WORKERS_SATURATED_PCT else (
                "input.io" if worker_cpu < WORKERS_IDLE_PCT else "input.preprocessing")
            host_cpu = host_cpu_p50(facts)
            if (kind == "input.io" and worker_cpu >= 100 * BUSY_STARVED * 2 and host_cpu is not None
                    and host_cpu >= HOST_SATURATED_PCT and foreign is None):
                # idle-looking workers on a saturated host are starved of CPU, not waiting on storage
                kind = "input.preprocessing"
                evidence.append(Evidence("host CPU (median)", round(host_cpu, 1), "% — workers starved of CPU",
                                         "host sampler"))
            demand = host.worker_cpu_demand if host else None
            if kind == "input.io" and demand is not None and demand >= WORKERS_WANT:
                kind = "input.preprocessing"  # busy-looking no, but wanting a CPU all along: starved
                starved = True
                evidence.append(Evidence("loader workers wanting a CPU (running or runnable)", round(demand * 100, 1),
                                         "% of the steps' time (mean per worker)", "schedstat: run + run delay"))
            runnable = host.worker_runnable_share if host and demand is None else None
            if kind == "input.io" and runnable is not None and runnable >= 0.5 and foreign is None:
                # Busy-looking no, but runnable: the workers want a CPU and don't get one (contention).
                kind = "input.preprocessing"
                evidence.append(Evidence("loader workers runnable (not sleeping)", round(runnable * 100, 1),
                                         "% of samples", "process sampler (/proc state R)"))
        else:  # workers whose CPU was not sampled: the training thread's CPU is all the evidence there is
            kind = "input.io"
        if kind != "input.preprocessing" and busy_ratio >= HANDOVER:
            kind = "input.handover"  # the workers keep up; the training thread's own receiving is the wait
        n = workers or (host.workers if host else 0) or 1
        prep_cpu_per_step = (worker_cpu or 0.0) / 100.0 * n * step_mean
    # --- did the loading read anything? (/proc/PID/io of the loading processes over the steps) ---
    read_bytes = host.loader_read_bytes if host else None
    read_chars = host.loader_read_chars if host else None
    no_storage = read_bytes is not None and read_bytes / max(s.steps, 1) < NO_STORAGE_BYTES
    in_memory = no_storage and read_chars is not None and read_chars / max(s.steps, 1) < IN_MEMORY_CHARS
    if read_bytes is not None:
        evidence.append(Evidence(
            f"read by the loading {'workers' if workers else 'process'} during the steps",
            round(read_bytes / max(s.steps, 1) / 1024, 1),
            "KiB a step from storage" + (f", {read_chars / max(s.steps, 1) / 1024:.1f} KiB through any read call"
                                         if read_chars is not None else ""),
            "/proc/PID/io (read_bytes, rchar)"))
    if workers and kind == "input.io" and in_memory and busy_ratio >= IN_MEMORY_HANDOVER:
        # idle workers that read nothing, and a training thread busy receiving for a good part of its wait: the
        # data set is in memory and the wait is each batch's hand-over from a worker process (field case: a
        # TensorDataset with 2 workers read "waits on storage" at 34-48 % of the wait on a CPU, just under
        # HANDOVER). Workers that read nothing but sleep (a remote call, a lock, a planted latency) leave the
        # training thread idle in its wait (1-14 %): latency, still input.io
        kind = "input.handover"
    if host and host.iowait_pct:
        evidence.append(Evidence("host iowait (mean)", round(host.iowait_pct["mean"], 1), "%", "host sampler"))

    # --- prediction: with enough workers, loading overlaps compute — on the cores that were free ---
    usable_cores = facts.usable_cores or float(cores)
    usable = max(1, int(usable_cores) - 1)  # leave one core for the training loop itself
    if kind == "input.preprocessing":
        free, free_how = free_worker_cores(facts, usable_cores)
        needed = math.ceil(prep_cpu_per_step / compute_mean) if compute_mean > 0 else usable
        new_workers = min(max(needed, (workers or 0) + 1), usable) if usable > (workers or 0) else (workers or 0)
        # workers load in parallel only on cores nobody else uses: the run measured how many were free
        parallel = min(new_workers, free)
        per_step_after = max(compute_mean, prep_cpu_per_step / parallel) if parallel > 0 else step_mean
        method = (
            f"loading overlaps compute once {new_workers} worker(s) run in parallel on the {free:.1f} core(s) "
            f"free during the run ({free_how}): step ≈ max(compute {compute_mean * 1e3:.1f} ms, loader CPU "
            f"{prep_cpu_per_step * 1e3:.1f} ms ÷ {parallel:.1f})"
        )
        title = "Input-bound: data preprocessing on the CPU is the bottleneck"
        no_free_core = new_workers > (workers or 0) and free < MIN_FREE_CORES
        # never recommend what the run already does, nor workers no core is free to run: the fix is then
        # cheaper loading, not a worker count
        fix_lines = ([loader_fix(facts, new_workers, loader=loader)]
                     if new_workers > (workers or 0) and not no_free_core else [])
        if not fix_lines:  # no worker to add: the gain is from making the loading cheaper, at most all of it
            per_step_after = compute_mean
            method = (f"no core {'free' if no_free_core else 'left'} for another worker ({free_how}): with the "
                      f"loading work cached or moved offline, step ≈ compute {compute_mean * 1e3:.1f} ms{CHEAP_NOTE}; "
                      "more workers: no gain")
        if no_free_core:
            fix_lines.append(
                f"No core was free for loader workers during this run ({free_how}): more workers would take CPU "
                "from the training loop and predict no gain here. Run where cores are free (or raise the "
                "container's CPU limit), or make the loading cheaper:")
        if needed > usable or not fix_lines or no_free_core:
            fix_lines.append(
                f"Even {usable} worker(s) can't hide {prep_cpu_per_step * 1e3:.0f} ms of CPU work per step: "
                "cache decoded/transformed samples, move preprocessing offline, or do it on the GPU (e.g. DALI)."
                if not no_free_core else
                "cache decoded/transformed samples, move preprocessing offline, or do it on the GPU (e.g. DALI)."
            )
        still_loader_bound = bool(fix_lines) and not no_free_core and per_step_after > compute_mean * 1.05
        if still_loader_bound:
            # the loading outweighs the compute: with every worker the cores allow, the step is still the
            # loading's, now in a worker, and the gain the ratio of two close numbers that assumes a worker makes
            # a batch as fast as the training thread did — which a run without workers cannot measure. The field
            # corpus' four such scripts measured ×0.89-1.03 for ×1.12-1.21 predicted from one worker (FakeData's
            # per-sample seeding took 1.7× as long in a worker); the cheaper loading the finding then leads with
            # measured ×5.0-7.1 (benchmarks/fixes_applied.py). Lead with that fix, and its gain.
            workers_bound = step_mean / per_step_after if per_step_after > 0 else 1.0
            per_step_after = compute_mean
            method = (f"with the loading made cheaper (cached, moved offline or onto the GPU), step ≈ compute "
                      f"{compute_mean * 1e3:.1f} ms{CHEAP_NOTE}; {new_workers} worker(s) alone would leave the "
                      f"step the loading's ({prep_cpu_per_step * 1e3:.1f} ms of loader CPU a step ÷ {parallel:.1f} "
                      f"core(s)): at most ×{workers_bound:.2f}, and only if a worker makes a batch as fast as the "
                      "training thread did — not measurable in a run without workers")
            caveat = (f"at most ×{workers_bound:.2f}, and only if a worker makes a batch as fast as the training "
                      "thread did (a worker's own per-batch cost can erase it: measure with it).")
            more = (f"More workers help less: {fix_lines[0]} gives {caveat}" if loader is not None else
                    "Moving the batch building into DataLoader workers helps less: "
                    + NO_LOADER_FIX.format(loader=loader_fix(facts, new_workers).split(" in your")[0])
                    + f" It gives {caveat}")
            fix_lines = [
                f"Make the loading cheaper: it takes {prep_cpu_per_step * 1e3:.0f} ms of CPU a step against "
                f"{compute_mean * 1e3:.0f} ms of compute — cache decoded/transformed samples, move preprocessing "
                "offline, or do it on the GPU (e.g. DALI).",
                more,
            ]
        evidence.append(Evidence("cores free for loader workers", round(free, 2), "cores", free_how))
        summary = (
            f"The training loop waited on {what} for {share:.0%} of step time, and the loading "
            f"was CPU work ({'in saturated workers' if workers else 'in the main thread'})."
            + (f" No core was free for more workers ({free_how}), so no gain is predicted from them."
               if no_free_core else "")
        )
    elif kind == "input.handover":
        still_loader_bound = False
        new_workers = workers or 0
        # a cheaper hand-over saves its CPU and the time blocked on the worker's side of the hand-shake: at
        # most the whole wait. Applied to scenarios/io_workers.py --fixed (2 cores, 3 pairs): the file_system
        # strategy took the wait from 1.5-2.1 to 0.5-1.0 ms a step, ×1.02-1.22 samples/s, where the training
        # thread's CPU alone (0.8-0.9 ms) would have bounded it at ×1.09-1.11
        per_step_after = compute_mean
        method = ("the wait for each batch's hand-over removed entirely (upper bound; a cheaper sharing "
                  "strategy or fewer, larger tensors per batch shorten it, they do not make it free): step ≈ "
                  f"compute {compute_mean * 1e3:.1f} ms")
        title = "Input-bound: the hand-over of each batch from its workers is the wait; the workers keep up"
        fix_lines = [
            "Not more workers: they keep up, and the training thread spends the wait receiving each batch "
            "(unpickling it and fetching every tensor's shared memory from the worker through a socket "
            "hand-shake).",
            "Call `torch.multiprocessing.set_sharing_strategy(\"file_system\")` before creating the DataLoader "
            "(no per-tensor hand-shake; it leaves shared-memory files behind if the job is killed), and return "
            "fewer, larger tensors per batch (one stacked tensor rather than a list or dict of many).",
        ]
        summary = (
            f"The training loop waited on {what} for {share:.0%} of step time, but its workers keep up: the "
            f"training thread was on a CPU for {busy_ratio:.0%} of that wait, receiving each batch from a worker "
            "— more workers would not shorten it."
        )
        if in_memory:
            # the data is in memory: a batch costs the training thread its indexing and collation — the workers'
            # CPU a batch less their side of the hand-over (pickling it into shared memory), taken to be as
            # large as the training thread's side (receiving it), which its clock measured. A floor on the gain:
            # on a small host the workers' CPU also slowed the training thread's compute, and that comes back
            # too (scenarios/in_memory_workers.py, 2 cores: ×1.2-1.4 predicted, ×2-4 measured)
            n = workers or (host.workers if host else 0) or 1
            inline = max((worker_cpu or 0.0) / 100.0 * n * step_mean - handover_mean, 0.0)
            per_step_after = compute_mean + inline
            method = (f"loading in the training thread (num_workers=0) instead of receiving from workers: step ≈ "
                      f"compute {compute_mean * 1e3:.1f} ms + the loading {inline * 1e3:.2f} ms (the workers' CPU a "
                      f"batch, {(worker_cpu or 0.0) / 100.0 * n * step_mean * 1e3:.2f} ms, less their side of the "
                      "hand-over) — a floor: the compute the workers' CPU slowed is not counted back")
            fix_lines = [
                inline_loading_fix(facts) + ": the data set is in memory, so a batch is an index and a "
                "collate — cheaper in the training thread than received from a worker process.",
                "Or keep the workers and make each hand-over cheaper: "
                "`torch.multiprocessing.set_sharing_strategy(\"file_system\")`, fewer, larger tensors per batch.",
            ]
            summary += (" Its workers read nothing (the data set is in memory): they add a hand-over per batch "
                        "and save no work.")
    else:
        still_loader_bound = False
        # Each batch keeps a worker busy (waiting) for its latency: with no workers that is the whole wait;
        # with w workers the loader delivers a batch per step, so a batch costs w × step. Hiding it needs
        # latency ÷ compute workers in flight, plus one so a slow read doesn't stall the queue.
        latency = wait_mean if not workers else workers * step_mean
        needed = math.ceil(latency / compute_mean) + 1 if compute_mean > 0 else 4
        new_workers = max(4, needed, (workers or 0) + 1)
        evidence.append(Evidence("read latency per batch (estimate)", round(latency * 1e3, 2), "ms",
                                 "data wait (no workers) or workers × step time"))
        # the training thread's share of the wait (receiving each batch) stays whatever the worker count
        per_step_after = compute_mean + handover_mean
        method = ("prefetching enough batches ahead hides the latency completely (upper bound): step ≈ compute"
                  + (f" + the {handover_mean * 1e3:.2f} ms the training thread spends receiving a batch"
                     if handover_mean > 0 else ""))
        title = "Input-bound: the loader waits on storage / latency, not CPU"
        fix_lines = [
            loader_fix(facts, new_workers, loader=loader),
            "Workers mostly wait, so more of them (beyond the core count) hide latency; also consider local "
            "caching/SSD staging of the dataset or larger sequential reads.",
        ]
        summary = (
            f"The training loop waited on {what} for {share:.0%} of step time while the loading "
            "used little CPU: it is waiting on I/O or latency."
        )
        if no_storage:
            # nothing came from storage: the page cache or memory served the reads, so faster storage or a
            # local copy would change nothing; what remains is latency (a remote store, a service, a lock, a sleep)
            title = "Input-bound: the loader waits on latency, not CPU or storage"
            fix_lines[1] = ("Workers mostly wait, so more of them (beyond the core count) hide latency. Nothing "
                            "was read from storage during the steps, so faster storage or a local copy would not "
                            "help: look for what the loading waits on (a remote store or service, a lock, a sleep).")
            summary = (f"The training loop waited on {what} for {share:.0%} of step time while the loading used "
                       "little CPU and read nothing from storage: it is waiting on latency.")
    if loader is None and fix_lines and not still_loader_bound:
        fix_lines[0] = NO_LOADER_FIX.format(loader=loader_fix(facts, new_workers).split(" in your")[0])
    spike_mean = s.data_wait_spike_s / n_steps
    if spike_mean > 0 and kind != "input.handover":
        # the few long waits (epoch boundaries…) are not more workers' to remove: they stay (a hand-over's fix
        # shortens every hand-over, the long ones too: its bound stays the whole wait)
        per_step_after += spike_mean
        method += (f"; the {s.data_wait_spike_steps} step(s) that waited far longer than the typical one keep "
                   f"their extra {s.data_wait_spike_s:.2f} s")
    saved = max(step_mean - per_step_after, 0.0)
    gain = gain_from_seconds(facts, saved * n_steps, method)
    # With workers the wait has two parts, and each fix reaches one: more workers the part spent waiting for
    # them (not the training thread's CPU in the hand-over), a cheaper hand-over that CPU and the blocking
    # around it. High needs the part its fix reaches to be measured at ≥ 20 % of the step: the workers' part
    # for input.io; for input.handover the training thread's CPU in it, the one part a clock proved.
    proven = {"input.io": wait_mean - handover_mean, "input.handover": handover_mean}.get(kind or "")
    if proven is not None and handover_mean > 0 and severity == "high" and proven < HIGH * step_mean:
        severity = "moderate"
    if foreign is not None and starved:
        summary += (f" Other processes used {foreign:.1f} cores meanwhile and the loading waited for a CPU: it is "
                    "CPU work their load starved, so it is slower here than on a quiet host.")
    elif foreign is not None:
        # the CPU-or-latency split reads CPU shares, which processes outside the job distort: a CPU-bound
        # worker that gets no core looks like one waiting on storage
        summary += (f" Other processes used {foreign:.1f} cores meanwhile, so whether the loading is CPU work "
                    "or latency is uncertain here: measure it again on a quiet host.")
    return [
        Finding(
            cause=kind,
            severity=severity,
            title=title,
            summary=summary,
            evidence=evidence,
            fix="\n".join(fix_lines),
            estimated_gain=gain,
            # a hand-over's cost depends on the host's scheduling of the worker's side of it: measured ×1.02-1.22
            # from the same fix on one host, so the split is sure but not how much of it a fix returns
            # still loader-bound: the cause is sure, the gain an upper bound of loading made cheaper (how cheap is
            # the user's to choose)
            confidence="low" if foreign is not None else "medium" if still_loader_bound else "high"
            if s.steps >= 10 and kind != "input.handover" else "medium",
        )
    ]


def spike_steps(facts: Facts, loader: LoaderConfig | None, share: float, typical: float, body_s: float
                ) -> list[Finding]:
    """The loop's input wait is carried by a few steps while the typical step barely waits. Those steps are
    their own thing: a DataLoader whose workers start again at every epoch (``persistent_workers=False``), a
    second loader read inside the steps, a cold cache. More workers or faster storage would not change the
    typical step, so neither ``input.io`` nor ``input.preprocessing`` is named (field case: data in memory read
    "waits on storage, confidence high" at a 3 ms median wait, the mean carried by two epoch-boundary steps)."""
    s = facts.outcomes.steps
    spike_share = s.data_wait_spike_s / body_s if body_s > 0 else 0.0
    if spike_share < MODERATE or s.data_wait_spike_steps < 2:
        return []  # one long wait is an anecdote (a preempted step on a busy host), not a pattern to fix
    workers = loader.get("num_workers") if loader else None
    restart = bool(workers) and loader is not None and not loader.get("persistent_workers")
    evidence = [
        Evidence("exposed data wait", round(share * 100, 1), "% of step time (mean)", "step instrumentation"),
        Evidence("typical step's data wait", round((s.data_wait_p50_s or 0.0) * 1e3, 2),
                 f"ms (median; {typical:.1%} of step time without the long waits)", "step instrumentation"),
        Evidence("steps that waited far longer", s.data_wait_spike_steps,
                 f"of {s.steps}, {s.data_wait_spike_s:.2f} s beyond the median", "step instrumentation"),
    ]
    if workers is not None:
        evidence.append(Evidence("DataLoader workers", workers,
                                 f"persistent_workers={bool(loader.get('persistent_workers')) if loader else None}",
                                 "DataLoader seen at run time"))
    if restart:
        fix = (f"{loader_fix(facts, int(workers or 0), loader=loader)}: persistent_workers=True keeps the {workers} worker(s) "
               "alive across epochs, so each epoch's first batches do not wait for workers to start again.")
        method = "the long waits' excess over the typical wait removed (upper bound: worker start-up per epoch)"
        gain = gain_from_seconds(facts, s.data_wait_spike_s, method)
    else:
        fix = ("Look at what the long-waiting steps hold (the report's structure note; a profiler trace of one): "
               "an evaluation or a second loader read inside the loop, or a cold cache. The typical step does "
               "not wait, so more workers or faster storage would not help it.")
        gain = None
    return [Finding(
        cause="input.spikes", severity="moderate",
        title=f"A few steps carry the input wait: {s.data_wait_spike_steps} of {s.steps} waited far longer than the "
              "typical step",
        summary=(f"The loop waited on its input for {share:.0%} of step time, but the typical step for "
                 f"{typical:.1%}: {s.data_wait_spike_steps} step(s) carry the rest"
                 + (" — the loader's workers start again at every epoch." if restart else ".")),
        evidence=evidence, fix=fix, estimated_gain=gain, confidence="medium" if restart else "low")]


H2D = ("memcpy_h2d_pageable", "memcpy_h2d", "memcpy_h2d_pinned")
H2D_MODERATE = 0.05
H2D_HIGH = 0.20
OVERLAP_CATS = ("compute", "comm")  # device work a copy can run under


@per_rank
def h2d_transfer(facts: Facts) -> list[Finding] | Missing:
    """Host-to-device copies exposed on the device timeline (§6 B4, C6): the device copies instead of
    computing, and pageable source memory makes "async" copies synchronous. Fires at ≥ 5 % of step time.

    Gain: pinned memory + ``non_blocking=True`` (or a prefetching side stream) lets a copy run *under*
    other device work; it cannot make the bytes free. So the most it saves is the exposed copy time the
    step's compute and communication could hide: min(exposed copies, other device work). Severity follows
    that gain (≥ 20 % of step time high), not the copy share: a window that is all copies and no compute
    (weights being loaded, a unified-memory storm) is named, but not promised a speed-up. When the copies
    already come from pinned memory the fix says so instead of recommending what the job already does."""
    t = rank_trace(facts)
    if t is None:
        return no_device_trace(facts, "host-to-device copies", "input.transfer", "a profiler trace with GPU activity")
    loader = training_loader(facts)
    exposed, total = step_idle(t, H2D)
    if not total or exposed / total < H2D_MODERATE or copy_bound_speaks(t):
        return []
    copies, busy = device_copies(t)
    copy_bound = busy > 0 and sum(copies.values()) / busy >= COPY_SHARE
    share = exposed / total
    pageable = step_idle(t, ("memcpy_h2d_pageable",))[0] / exposed if exposed else 0.0
    other_work = step_idle(t, OVERLAP_CATS)[0] / total
    saved_share = min(share, other_work)
    pinned_already = pageable < 0.2 and (loader is None or loader.get("pin_memory") is not False)
    if pinned_already:
        fix = ("The copies already come from pinned memory, so pinning is not the fix: send fewer bytes. Keep "
               "tensors that do not change on the device across steps (weights, constants, masks); prefetch the "
               "next batch on a side stream (`torch.cuda.Stream()` + `non_blocking=True`) so it overlaps this "
               "step's compute; ship compact dtypes (uint8/bf16) and convert on the device. If this window is "
               "start-up (loading weights), profile steady-state steps instead.")
    else:
        fix = ("DataLoader(..., pin_memory=True) and `x = x.to('cuda', non_blocking=True)`; for tensors built "
               "outside a loader, `.pin_memory()` once; create constant tensors directly on the device.")
    return [Finding(
        cause="input.transfer", severity="high" if saved_share >= H2D_HIGH else "moderate",
        title=("Copy-bound: " if copy_bound else "")
        + f"Host-to-device copies exposed: {share:.0%} of step time ({pageable:.0%} from pageable memory)",
        summary=("The device spends part of each step copying inputs instead of computing"
                 + ("; copies from pageable memory cannot overlap compute." if not pinned_already else
                    f"; the step has {other_work:.0%} of other device work to hide copies under.")),
        evidence=[Evidence("exposed H2D copies", round(share * 100, 1), "% of step time", f"trace {t.label}"),
                  Evidence("from pageable memory", round(pageable * 100, 1), "% of H2D copy time", "trace memcpy kinds"),
                  Evidence("other device work (could hide copies)", round(other_work * 100, 1), "% of step time",
                           "trace partition")]
        + ([Evidence("DataLoader pin_memory", loader.get("pin_memory"), "", "DataLoader seen at run time")]
           if loader is not None else []),
        fix=fix,
        estimated_gain=gain_from_seconds(facts, run_seconds(facts, saved_share),
                                         "exposed copy time hidden under the step's other device work "
                                         "(at most that work; upper bound)"),
        confidence="medium",
    )]
