"""``input.io``: the loading waits on storage or latency, not CPU — its prediction (enough batches in flight hide
the latency) and its fix."""

from __future__ import annotations

import math

from gpusleuth.diagnosis.facts import Facts, LoaderConfig
from gpusleuth.diagnosis.finding import Evidence
from gpusleuth.diagnosis.rules._framework import loader_fix
from gpusleuth.diagnosis.rules.input._shared import InputWait, Remedy


def remedy(facts: Facts, w: InputWait, loader: LoaderConfig | None) -> Remedy:
    """Prefetching enough batches ahead hides the latency (upper bound); the hand-over's CPU stays."""
    workers, what, share = w.workers, w.what, w.share
    step_mean, wait_mean, compute_mean = w.step_mean, w.wait_mean, w.compute_mean
    handover_mean, no_storage, evidence = w.handover_mean, w.no_storage, w.evidence
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
    return Remedy(title, summary, fix_lines, per_step_after, method, new_workers, still_loader_bound)
