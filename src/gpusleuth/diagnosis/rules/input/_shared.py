"""What the input rules share: thresholds, the training loop's loader, the cores free for loader workers, and the
measured wait (``InputWait``) that ``bound.input_bound`` hands to each cause's module, which answers with its
prediction and fix (``Remedy``).

Severity follows the exposed data wait's share of step time: ≥ 5 % moderate, ≥ 20 % high (the
thresholds of XProf's input-pipeline analysis and the PyTorch TensorBoard plugin's DataLoader advice).
The split between preprocessing and I/O comes from CPU evidence: with ``num_workers=0`` the main
thread's own CPU time inside the waits (busy → it was transforming; idle → it was waiting on storage);
with workers, how busy the worker processes were — and the training thread's own CPU inside its waits, which
with workers is the hand-over of each batch (``input.handover`` when it is most of the wait: more workers
cannot shorten it, and a latency prediction keeps it in the step it predicts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpusleuth.diagnosis.facts import Facts, LoaderConfig
from gpusleuth.diagnosis.finding import Evidence

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


@dataclass
class InputWait:
    """The steady steps' input wait as ``input_bound`` measured it: what each cause's ``remedy`` reads (and the
    evidence list it appends to), beside the training loop's DataLoader config (``loader``: a hook record)."""

    workers: int | None  # the loader's num_workers (None: unknown or no loader)
    what: str  # what the loop waited on, in the summary's words
    share: float  # the exposed wait's share of step time (mean)
    step_mean: float  # s per steady step
    wait_mean: float  # s of input wait per steady step
    compute_mean: float  # the rest of the step
    busy_ratio: float  # the waiting thread's CPU ÷ its wait
    worker_cpu: float | None  # loader workers' CPU, % of one core (mean)
    handover_mean: float  # with workers: the training thread's CPU receiving batches, s per step
    prep_cpu_per_step: float  # the loading's CPU, s per step
    no_storage: bool  # the loading read (almost) nothing from storage
    in_memory: bool  # ... nor through any read call: the data is in memory
    usable_cores: float  # cores the job may use
    usable: int  # the most workers to recommend (one core left for the training loop)
    evidence: list[Evidence] = field(default_factory=list)


@dataclass
class Remedy:
    """A cause's prediction and fix for the measured wait."""

    title: str
    summary: str
    fix_lines: list[str]
    per_step_after: float  # the predicted step, s
    method: str  # how ``per_step_after`` was predicted
    new_workers: int  # the worker count the fix names
    still_loader_bound: bool = False  # with the fix applied the step is still the loading's
