"""Goodput: productive step time ÷ wall time, with badput categories that sum to the rest.

The categories follow Google's ml-goodput-measurement (offline and GPU-aware here): start-up before the
first step, warm-up/compilation (the excess of the first steps over the steady step time), exposed data
wait, each named phase (evaluation, checkpointing, logging…), stalls (the excess of the steps that sat
through a stall the recorder's watch saw, over the steady step time), other idle time (gaps and the idle tail),
and lost progress after restarts where the run shows them. Productive time is what remains of the steps:
compute at the steady pace.

Warm-up detection (``analysis/steps.warmup_count``, the one definition): leading steps slower than
median + 3·MAD of all steps (MAD scaled to σ) are warm-up; their time beyond the steady median counts as
``warmup`` badput — the same inference Google's tool uses
for compilation ("program startup"), since it is rarely instrumented.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpusleuth.analysis.outcomes import Outcomes
from gpusleuth.analysis.steps import StepView
from gpusleuth.run.model import Run


@dataclass
class SteadyState:
    warmup_steps: int
    warmup_excess_s: float  # time the warm-up steps took beyond the steady median
    steps: int
    step_time_p50_s: float | None
    step_time_p95_s: float | None
    step_time_cv: float | None
    samples_per_s: float | None
    tokens_per_s: float | None
    stalled_excess_s: float = 0.0  # time the steps that sat through a stall took beyond the steady median


@dataclass
class Goodput:
    goodput: float  # productive ÷ wall
    productive_s: float
    wall_s: float
    badput_s: dict[str, float] = field(default_factory=dict)
    badput_share: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def tokens_total(run: Run, lo: int, hi: int) -> int | None:
    total = 0
    seen = False
    for rec in run.logs:
        if "tokens" in rec and rec.get("tokens") is not None and lo <= rec.get("t_ns", lo) <= hi + int(1e9):
            total += int(rec["tokens"])
            seen = True
    return total if seen else None


def steady_state(run: Run, view: StepView) -> SteadyState:
    main = view.main
    if main is None or not main.count:
        return SteadyState(0, 0.0, 0, None, None, None, None, None)
    steps = main.table
    secs = main.seconds
    w = main.warmup
    keep = main.steady  # warm-up, the profiled steps and the FLOP-counted one left out (analysis/steps.py)
    steady = secs[keep]
    med = float(np.median(steady))
    excess = float(np.maximum(secs[:w] - med, 0).sum())
    stalled = [i for i in main.stalled if i >= w]  # a stall inside the warm-up is in its excess already
    stalled_excess = float(np.maximum(secs[stalled] - med, 0).sum()) if stalled else 0.0
    samples = steps["samples"][keep]
    known = samples >= 0
    sps = float(samples[known].sum() / steady[known].sum()) if known.any() and steady[known].sum() > 0 else None
    tokens = tokens_total(run, int(steps["start_ns"][w]), int(steps["end_ns"][-1]))
    tps = tokens / float(steady.sum()) if tokens and steady.sum() > 0 else None
    from_batches = tps is None and "tokens" in steps
    if from_batches:
        # no gpusleuth.log tokens: the hook's count from each step's batch tensor (2-D integer ids), over
        # the steady steps where it was seen — the same basis as samples/s
        tps = main.steady_tokens_per_s()
    if len(view.ranks) > 1:
        # the job's throughput: every rank's (or trainer's) steady samples/s, summed — each trains on its own
        # shard — and divided by the ranks that share one batch (tensor parallelism: a batch counts once)
        # (tokens from gpusleuth.log records come from every process, so that tokens/s is the job's already)
        share = view.structure.model_parallel
        rates = [r for p in view.ranks if (r := p.steady_samples_per_s()) is not None]
        sps = float(sum(rates)) / share if len(rates) == len(view.ranks) else sps
        if from_batches:  # tokens read from each rank's own batches: the job's is their sum, like samples
            trates = [r for p in view.ranks if (r := p.steady_tokens_per_s()) is not None]
            tps = float(sum(trates)) / share if len(trates) == len(view.ranks) else tps
    return SteadyState(
        warmup_steps=w,
        warmup_excess_s=excess,
        steps=len(steady),
        step_time_p50_s=med,
        step_time_p95_s=float(np.percentile(steady, 95)),
        step_time_cv=float(steady.std() / steady.mean()) if len(steady) > 1 and steady.mean() > 0 else None,
        samples_per_s=sps,
        tokens_per_s=tps,
        stalled_excess_s=stalled_excess,
    )


def compute_goodput(run: Run, outcomes: Outcomes, steady: SteadyState) -> Goodput:
    wall = outcomes.wall_s
    t = outcomes.time_s
    badput = {"startup": t.get("startup", 0.0), "warmup": steady.warmup_excess_s,
              "data_wait": t.get("data_wait", 0.0)}
    for name, secs in t.items():
        if name not in ("startup", "data_wait", "compute", "other"):
            badput[name] = secs
    badput["other_idle"] = t.get("other", 0.0)
    badput["lost_progress"] = 0.0
    if steady.stalled_excess_s:
        badput["stalled"] = steady.stalled_excess_s  # the hang finding's pause (analysis/stalls.py)
    productive = max(t.get("compute", 0.0) - steady.warmup_excess_s - steady.stalled_excess_s, 0.0)
    notes = []
    if outcomes.steps.steps == 0:
        notes.append("no training steps were seen: goodput is 0 by definition")
    notes.append("lost progress after restarts needs restart markers (one recorded run has none)")
    return Goodput(
        goodput=productive / wall if wall else 0.0,
        productive_s=productive,
        wall_s=wall,
        badput_s=badput,
        badput_share={k: (v / wall if wall else 0.0) for k, v in badput.items()},
        notes=notes,
    )
