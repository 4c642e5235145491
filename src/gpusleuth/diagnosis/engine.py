"""Run every rule over the facts and rank the findings.

Ranking: severity first (a high finding is a bottleneck; moderate ones are worth knowing), then
estimated gain as a share of wall time. Rules that lacked their data come back as ``Missing`` and are
listed, per cause, in the report's "not evaluated" entries with what to run to get the data.

The engine owns the per-rank and per-GPU loop. A rule marked ``@per_rank`` / ``@per_gpu``
(``rules/_scope.py``) is written for one rank's trace or one card's telemetry; :func:`judge` calls it once
per rank (``Facts.for_rank``) or per GPU (``Facts.for_gpu``) and merges:

- findings: one per cause for the job (:func:`one_per_cause`) — the worst rank or card speaks with its own
  numbers, and its evidence names every other rank or card the cause was seen on;
- ``Missing`` on some units, findings or silence on others: what was judged stands, and the rule is also
  listed as not evaluated *for the units that lacked its data* ("…, on rank 3 (1 of 4 ranks)"), with the
  same note on each merged finding — a verdict on rank 0 never hides that rank 3 was not looked at;
- ``Missing`` on every unit: the rule's own ``Missing``, once, as if it had been called on the job;
- no unit at all (no trace, no GPU telemetry): the rule is called on the whole facts and says itself what
  it lacks, as before.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Confidence, Evidence, Finding, Missing
from gpusleuth.diagnosis.taxonomy import STAGE_OF_CAUSE
from gpusleuth.diagnosis.rules import (busy_idle, copies, distributed, gpu, gpu_log, hangs, host, memory, phases,
                                       precision, sizing, stragglers, sync, throttling)
from gpusleuth.diagnosis.rules.input import bound as input_bound, transfer as input_transfer
from gpusleuth.diagnosis.rules._scope import Scope, scope_of
from gpusleuth.serving.rules import batching as serving_batching
from gpusleuth.serving.rules import capacity as serving_capacity
from gpusleuth.serving.rules import request_path as serving_request_path
from gpusleuth.serving.rules import slo as serving_slo

Rule = Callable[[Facts], list[Finding] | Missing]
NAMED = 8  # ranks or GPUs named where a rule could not judge them; the rest are counted

# In the product brief's debugging order; the order only matters for ties and for "not evaluated".
RULES = (
    hangs.hangs,
    throttling.clock_throttling,
    gpu.low_gpu_low_cpu,
    host.oversubscription,
    host.cgroup_throttling,
    host.foreign_load,
    phases.phase_time,
    stragglers.straggler,
    memory.step_overhead,
    gpu.memory_headroom,
    serving_batching.under_batched,
    memory.memory_capacity,
    serving_request_path.preprocessing_in_request_path,
    serving_request_path.queueing,
    serving_request_path.waiting_before_the_model,
    serving_batching.waiting_for_a_batch,
    serving_request_path.outside_the_server,
    serving_slo.slo_misses,
    serving_capacity.prefill_behind_decode,
    serving_capacity.too_few_replicas,
    serving_batching.engine_capacity,
    input_bound.input_bound,
    input_transfer.h2d_transfer,
    sync.sync_stalls,
    sync.launch_bound,
    host.python_overhead,
    precision.fp32_math,
    distributed.exposed_communication,
    busy_idle.busy_but_idle,
    sizing.sizing_vs_stall,
    gpu_log.idle_gpus,
    gpu_log.bursty_or_steady,
    gpu_log.gpu_imbalance,
    copies.copy_bound,
)


def one_per_cause(found: list[Finding], unit: str = "ranks") -> list[Finding]:
    """Merge one rule's findings of one cause across ranks (or GPUs): the largest gain speaks for the job, the
    others are listed in its evidence (their own numbers kept), so nothing a rank or card showed is lost."""
    by_cause: dict[str, list[Finding]] = {}
    for f in found:
        by_cause.setdefault(f.cause, []).append(f)
    out = []
    for group in by_cause.values():
        if len(group) == 1:
            out.append(group[0])
            continue
        group.sort(key=lambda f: f.rank_key)
        top = group[0]
        top.evidence = top.evidence + [Evidence(f"same cause on another {unit[:-1]}", f.title, "",
                                                f.evidence[0].source if f.evidence else "") for f in group[1:]]
        top.summary = f"{top.summary} Seen on {len(group)} {unit}; the numbers are the worst one's."
        out.append(top)
    return out


def judge(rule: Rule, facts: Facts, views_of: dict[Scope, list[tuple[str, Facts]]] | None = None,
          ) -> tuple[list[Finding], list[Missing], bool]:
    """One rule over the facts: (its findings, what it lacked, whether it judged anything). A rule with a
    scope is called once per rank or GPU and its answers merged (the module's docstring says how).
    ``views_of``: the views already cut, per scope, so that the rules of one scope share them."""
    scope = scope_of(rule)
    views: list[tuple[str, Facts]] = []
    if scope is not None:
        views_of = {} if views_of is None else views_of
        if scope not in views_of:
            views_of[scope] = scope.views(facts)
        views = views_of[scope]
    if scope is None or not views:
        result = rule(facts)
        return ([], [result], False) if isinstance(result, Missing) else (result, [], True)
    found: list[Finding] = []
    lacked: dict[tuple[str, str], tuple[Missing, list[str]]] = {}
    for name, view in views:
        result = rule(view)
        if isinstance(result, Missing):
            lacked.setdefault((result.needs, result.how), (result, []))[1].append(name)
        else:
            found.extend(result)
    merged = one_per_cause(found, scope.unit)
    groups = list(lacked.values())
    if len(groups) == 1 and len(groups[0][1]) == len(views):
        return [], [groups[0][0]], False  # no rank or GPU had the data: the rule's own Missing, once
    missing = []
    for m, names in groups:
        shown = ", ".join(names[:NAMED]) + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")
        where = f"{shown} ({len(names)} of {len(views)} {scope.unit})"
        missing.append(replace(m, rule=f"{m.rule}, on {where}"))
        for f in merged:
            f.missing = f.missing + [f"not judged on {where}: needs {m.needs}"]
    return merged, missing, sum(len(names) for _, names in groups) < len(views)


# findings whose numbers are per step (the input wait's share, a phase's cadence, a rank's extra time): a step
# count the structure check doubts makes them doubtful too
PER_STEP_STAGES = ("input", "stages", "batch")
LOWER: dict[Confidence, Confidence] = {"high": "medium", "medium": "low", "low": "low"}


def doubt_steps(f: Finding, doubt: str) -> Finding:
    """``f`` with a level less confidence and the structure check's doubt as evidence, if it rests on steps."""
    if STAGE_OF_CAUSE.get(f.cause) not in PER_STEP_STAGES or f.severity == "none" or f.cause.startswith("serving."):
        return f
    return replace(f, confidence=LOWER[f.confidence],
                   evidence=[*f.evidence, Evidence("step structure (doubtful)", doubt, "",
                                                   "structure check: the run's own counts")])


def diagnose(facts: Facts) -> tuple[list[Finding], list[Missing]]:
    findings: list[Finding] = []
    missing: list[Missing] = []
    judged = 0
    views_of: dict[Scope, list[tuple[str, Facts]]] = {}
    for rule in RULES:
        found, lacked, any_judged = judge(rule, facts, views_of)
        findings.extend(found)
        missing.extend(lacked)
        judged += any_judged
    if facts.step_doubt:
        findings = [doubt_steps(f, facts.step_doubt) for f in findings]
    findings.sort(key=lambda f: f.rank_key)
    unjudged = not_judged(facts) if not any(f.severity != "none" for f in findings) else None
    if unjudged is not None:
        findings.append(unjudged)
    elif not any(f.severity != "none" for f in findings) and facts.outcomes.steps.steps:
        s = facts.outcomes.steps
        findings.append(
            Finding(
                cause="healthy",
                severity="none",
                title="No bottleneck above the thresholds",
                summary=(
                    f"Exposed data wait was {s.data_wait_share_of_steps:.1%} of step time (< 5 %), no phase "
                    "took ≥ 5 % of the training loop, and no other rule fired."
                ),
                evidence=[Evidence("exposed data wait", round(s.data_wait_share_of_steps * 100, 2),
                                   "% of step time", "step instrumentation"),
                          Evidence("rules evaluated", judged, f"of {len(RULES)}", "engine")],
                fix="Nothing to fix above the thresholds; the rules that could not run (below) say what data "
                    "would let them look further.",
                confidence="medium" if not missing else "low",
            )
        )
    return findings, missing


def not_applicable(facts: Facts, missing: list[Missing]) -> tuple[list[Missing], list[Missing], str]:
    """(still missing, not applicable, why): a server recorded under load with no training step has nothing a
    training-loop rule could judge — telling its user to "run a PyTorch training loop under `gpusleuth run`"
    (four checks' advice) was noise in every serving report. Those rules are listed apart, once, with the
    reason; a server that also trains (steps recorded) keeps them."""
    if (facts.load is None and facts.requests is None) or facts.outcomes.steps.steps:
        return missing, [], ""
    gone = [m for m in missing if m.training_only]
    return ([m for m in missing if not m.training_only], gone,
            "a server under load, with no training steps" if gone else "")


def not_judged(facts: Facts) -> Finding | None:
    """Traces read alone with no step to judge (no ProfilerStep, no NVTX step range, or a capture too small
    for the whole-window fallback): the per-step rules had nothing to look at, so "healthy — no bottleneck"
    would be a verdict on nothing (issue 27: an Nsight export whose device time was 91 % copies was
    "healthy" while its losses said it was too small to judge). Say what the device did instead, and why no
    finding is ranked. None when a recording or a trace with steps was judged."""
    if facts.recorded or not facts.traces or any(t.steps for t in facts.traces):
        return None
    dev = [t for t in facts.traces if t.device_span_s > 0]
    evidence = []
    parts = []
    for t in dev:
        span = t.device_span_s
        p = t.span_partition
        copies = sum(v for k, v in p.items() if k.startswith("memcpy"))
        compute = p.get("compute", 0.0) + p.get("comm", 0.0) + p.get("memset", 0.0)
        idle = max(span - copies - compute, 0.0)
        parts.append(f"{t.label}: {span * 1e3:.2f} ms of device span — copies {copies / span:.1%}, kernels "
                     f"{compute / span:.1%}, idle {idle / span:.1%} ({t.kernels.kernels} kernels)")
        evidence += [Evidence("device span", round(span * 1e3, 3), "ms", f"trace {t.label}"),
                     Evidence("copies", round(copies / span * 100, 1), "% of device span", f"trace {t.label}"),
                     Evidence("kernels (compute, comm, memset)", round(compute / span * 100, 1), "% of device span",
                              f"trace {t.label}"),
                     Evidence("idle", round(idle / span * 100, 1), "% of device span", f"trace {t.label}")]
    did = ("; ".join(parts) + ".") if parts else "The traces hold no device work."
    return Finding(
        cause="not_judged", severity="none",
        title="Not judged: no training step in the traces to rank a bottleneck on",
        summary=(f"{did} No finding is ranked: the per-step rules need steps — ProfilerStep annotations "
                 "(`prof.step()`), an NVTX range named with `--step-range`, or a capture large enough to be "
                 "analysed as one window — and these traces have none (see the losses)."),
        evidence=evidence,
        fix=("Profile a few training iterations with step marks: `torch.profiler.profile(schedule=…)` and "
             "`prof.step()` each iteration (or `gpusleuth run --profile-steps 5-8 -- …`); for Nsight, wrap each "
             "iteration in an NVTX range and pass its name with `--step-range NAME`."),
        confidence="high",
    )
