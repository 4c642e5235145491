"""Run every rule over the facts and rank the findings by estimated gain."""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules import gpu, input as input_rules

RULES = (
    input_rules.input_bound,
    gpu.low_gpu_low_cpu,
    gpu.memory_headroom,
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
                    f"Exposed data wait was {s.data_wait_share_of_steps:.1%} of step time "
                    "(< 5 %) and no other rule fired."
                ),
                evidence=[Evidence("exposed data wait", round(s.data_wait_share_of_steps * 100, 2),
                                   "% of step time", "step instrumentation")],
                fix="Nothing to fix on the input side; look at the rules that could not run (below) for more.",
                confidence="medium",
            )
        )
    return findings, missing
