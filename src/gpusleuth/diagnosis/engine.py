"""Run every rule over the facts and rank the findings.

Ranking: severity first (a high finding is a bottleneck; moderate ones are worth knowing), then
estimated gain as a share of wall time. Rules that lacked their data come back as ``Missing`` and are
listed, per cause, in the report's "not evaluated" entries with what to run to get the data.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules import (busy_idle, distributed, gpu, host, memory, phases, precision, sizing,
                                       stragglers, sync, throttling)
from gpusleuth.diagnosis.rules import input as input_rules

# In the product brief's debugging order; the order only matters for ties and for "not evaluated".
RULES = (
    throttling.clock_throttling,
    gpu.low_gpu_low_cpu,
    host.oversubscription,
    host.cgroup_throttling,
    phases.phase_time,
    stragglers.straggler,
    memory.step_overhead,
    gpu.memory_headroom,
    memory.memory_capacity,
    input_rules.input_bound,
    input_rules.h2d_transfer,
    sync.sync_stalls,
    sync.launch_bound,
    host.python_overhead,
    precision.fp32_math,
    distributed.exposed_communication,
    busy_idle.busy_but_idle,
    sizing.sizing_vs_stall,
)


def diagnose(facts: Facts) -> tuple[list[Finding], list[Missing]]:
    findings: list[Finding] = []
    missing: list[Missing] = []
    for rule in RULES:
        result = rule(facts)
        if isinstance(result, Missing):
            missing.append(result)
        else:
            findings.extend(result)
    findings.sort(key=lambda f: f.rank_key)
    if not any(f.severity != "none" for f in findings) and facts.outcomes.steps.steps:
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
                          Evidence("rules evaluated", len(RULES) - len(missing), f"of {len(RULES)}", "engine")],
                fix="Nothing to fix above the thresholds; the rules that could not run (below) say what data "
                    "would let them look further.",
                confidence="medium" if not missing else "low",
            )
        )
    return findings, missing
