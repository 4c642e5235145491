"""``input.handover``: the workers keep up and the training thread's receiving of each batch is the wait — its
prediction (the wait removed, or with data in memory no workers at all) and its fix."""

from __future__ import annotations


from gpusleuth.diagnosis.facts import Facts, LoaderConfig
from gpusleuth.diagnosis.rules._framework import inline_loading_fix
from gpusleuth.diagnosis.rules.input._shared import InputWait, Remedy


def remedy(facts: Facts, w: InputWait, loader: LoaderConfig | None) -> Remedy:
    """A cheaper hand-over saves at most the whole wait; over data in memory, loading in the training thread."""
    workers, what, share, step_mean, compute_mean = w.workers, w.what, w.share, w.step_mean, w.compute_mean
    busy_ratio, in_memory, worker_cpu, handover_mean = w.busy_ratio, w.in_memory, w.worker_cpu, w.handover_mean
    host = facts.host
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
    return Remedy(title, summary, fix_lines, per_step_after, method, new_workers, still_loader_bound)
