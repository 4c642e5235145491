"""``input.preprocessing``: the loading is CPU work — its prediction (workers on the cores that were free, or
cheaper loading) and its fix."""

from __future__ import annotations

import math

from gpusleuth.diagnosis.facts import Facts, LoaderConfig
from gpusleuth.diagnosis.finding import Evidence
from gpusleuth.diagnosis.rules._framework import loader_fix
from gpusleuth.diagnosis.rules.input._shared import (CHEAP_NOTE, MIN_FREE_CORES, NO_LOADER_FIX, InputWait, Remedy,
                                                     free_worker_cores)


def remedy(facts: Facts, w: InputWait, loader: LoaderConfig | None) -> Remedy:
    """With enough workers, loading overlaps compute — on the cores that were free; where no core is free, or
    the loading outweighs the compute, the fix is cheaper loading."""
    workers, what, share = w.workers, w.what, w.share
    step_mean, compute_mean = w.step_mean, w.compute_mean
    prep_cpu_per_step, usable_cores, usable, evidence = w.prep_cpu_per_step, w.usable_cores, w.usable, w.evidence
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
    return Remedy(title, summary, fix_lines, per_step_after, method, new_workers, still_loader_bound)
