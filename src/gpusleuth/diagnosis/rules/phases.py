"""Phase-attributed time: evaluation, checkpointing and logging inside the training loop (catalogue §7 N4).

These phases are *expected work*, not waste: a finding here never says "bottleneck" and is never ``high``.
It quantifies what the phase costs (share of the training loop, seconds per run, how often it runs) and
what a cheaper schedule would save, so the user can decide. Phases come from the hook (``model.eval()``
→ ``eval``, ``torch.save`` to a file → ``checkpoint``) or from ``gpusleuth.phase("logging")``.

Thresholds: reported from 5 % of the training loop (XProf's moderate tier for input time, reused because
it is the level at which a user notices). Gain: running the phase ``K×`` less often saves ``(1 − 1/K)`` of
its time; K = 4 for evaluation (a quarter of the evaluations, or a quarter of the validation set), 10 for
checkpoints and logging (the usual "every N steps" knobs move by a decade). For checkpoints, asynchronous
saving hides most of the write instead.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts, PhaseStats
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import gain_from_seconds, no_steps
from gpusleuth.diagnosis.rules._framework import checkpoint_fix, eval_fix

REPORT_SHARE = 0.05
FACTOR = {"eval": 4, "checkpoint": 10, "logging": 10}
CAUSE = {"eval": "phase.eval", "checkpoint": "phase.checkpoint", "logging": "phase.logging"}
ALIASES = {"evaluation": "eval", "validation": "eval", "val": "eval", "validate": "eval", "ckpt": "checkpoint",
           "save": "checkpoint", "log": "logging", "metrics": "logging"}


def _kind(name: str) -> str | None:
    n = name.lower()
    n = ALIASES.get(n, n)
    return n if n in CAUSE else None


def _seen(p: PhaseStats) -> str:
    """"once, at step 1" / "2 times, at steps 1 and 150": what a run too short for a cadence saw."""
    times = "once" if p.count == 1 else f"{p.count} times"
    if not p.at_steps:
        return times
    where = " and ".join(str(a) for a in p.at_steps[:4])
    return f"{times}, at step{'s' if len(p.at_steps) > 1 else ''} {where}"


def _fix(facts: Facts, kind: str, p: PhaseStats, k: int) -> str:
    every = f"every {p.steps_between:.0f} steps" if p.steps_between else f"{p.count} times"
    if kind == "eval":
        return eval_fix(facts, every, k, p.steps_between)
    if kind == "checkpoint":
        return checkpoint_fix(facts, every, k, p.steps_between)
    return (f"Logging runs {every}; log every {k}× fewer steps, accumulate metrics on the device "
            "(`running += loss.detach()`) and read them once per logging interval; avoid formatting "
            "tensors (`print(tensor)`, `str(tensor)`) and histogram/norm computations every step.")


def phase_time(facts: Facts) -> list[Finding] | Missing:
    s = facts.outcomes.steps
    if not s.steps:
        return no_steps("phase time (eval / checkpoint / logging)", "phase.eval")
    loop = facts.loop
    findings = []
    for name, p in facts.phases.items():
        kind = _kind(name)
        if kind is None or p.total_s <= 0:
            continue  # only after the last step (or never): after-training time, no cadence to change
        share = p.total_s / loop
        if share < REPORT_SHARE:
            continue
        k = FACTOR[kind]
        cost = p.total_s + p.after_penalty_s
        after = (f" plus {p.after_penalty_s * 1e3:.0f} ms it left in the steps right after it"
                 if p.after_penalty_s >= 0.0005 else "")
        if p.steps_between is None:
            # too few occurrences to know how often it runs: say what was seen, advise no cadence, claim no gain
            seen = _seen(p)
            gain = None
            fix = (f"'{name}' ran {seen} in this run: too few times to tell how often it recurs, so no "
                   "'less often' advice. If it runs once at the start (a first evaluation, a sample, a save at "
                   "step 0), its share shrinks over a longer run; make each occurrence cheaper if it matters "
                   "(a subset of the validation set, `torch.no_grad()`, an asynchronous save), or record a "
                   "longer run to see its cadence.")
        else:
            gain = gain_from_seconds(
                facts, cost * (1 - 1 / k),
                f"running '{name}' {k}× less often saves (1 − 1/{k}) of its {p.total_s:.2f} s "
                f"({p.count} × {p.mean_s * 1e3:.0f} ms){after}; other steps unchanged",
                per_step=False,
            )
            fix = _fix(facts, kind, p, k)
        findings.append(Finding(
            cause=CAUSE[kind],
            severity="moderate",
            title=f"'{name}' takes {share:.0%} of the training loop (expected work, not waste)",
            summary=(f"The training process spent {p.total_s:.2f} s in '{name}' ({p.count} times, "
                     f"{p.mean_s * 1e3:.0f} ms each) — {share:.0%} of the training loop. This is expected "
                     "work; whether it is worth its cost is your call. The GPU/CPU dips it causes are "
                     "not a pipeline stall."),
            evidence=[
                Evidence(f"time in '{name}'", round(p.total_s, 3), "s", "phase events (hook / gpusleuth.phase)"),
                Evidence("share of the training loop", round(share * 100, 1), "%", "phases ÷ (last step end − first step start)"),
                Evidence("occurrences", p.count, "", "phase events"),
                Evidence("mean duration", round(p.mean_s * 1e3, 1), "ms", "phase events"),
            ] + ([Evidence("training steps between occurrences", round(p.steps_between, 1), "steps",
                           "median steps between the starts")] if p.steps_between is not None else
                 [Evidence("started at training step", ", ".join(str(a) for a in p.at_steps[:8]), "",
                           "phase events ÷ steps")] if p.at_steps else []) + ([Evidence(f"'{name}' after the last step (after-training time, not counted above)",
                           round(p.after_loop_s, 3), "s", "phase events after the last step's end")]
                 if p.after_loop_count else []) + ([Evidence(f"step right after '{name}' (median)", round(p.after_step_s * 1e3, 2), "ms",
                           "steps ÷ phase events"),
                  Evidence("other steps (median)", round(p.other_step_s * 1e3, 2), "ms", "steps"),
                  Evidence(f"after-cost of '{name}' in total", round(p.after_penalty_s, 3), "s",
                           "(after − other) × steps after it")]
                 if p.after_penalty_s > 0 and p.after_step_s is not None and p.other_step_s is not None else []),
            fix=fix,
            estimated_gain=gain,
            confidence="high" if p.count >= 3 else "medium" if gain is not None else "low",
        ))
    return findings
