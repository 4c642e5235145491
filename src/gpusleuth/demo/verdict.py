"""What the demo's two runs say about the planted run's prediction — judged only where the runs can judge it.

The demo is the first thing a user runs, usually on a laptop or a shared node. Printing "measured ×1.03 /
predicted ×1.64" with nothing else (issue 27: other processes used 1.0–1.6 of 2 cores meanwhile) reads as
a broken tool. So the verdict says what was seen and why:

- the planted run's input finding recommends loader workers and predicts ×P (bounded by the cores that were
  free during that run): the prediction *held* when the fixed run measured within :data:`TOLERANCE` of it;
- a miss while processes outside the job crowded either run is *not judged*: their load, not the fix, is
  what the two runs differ by, and the verdict names it;
- the finding found no free core and predicted no gain from more workers: the verdict repeats why, and a
  measured speed-up beyond the tolerance is put down to the load that changed between the runs;
- a miss on a quiet host is said as a miss: that is a wrong model, and hiding it would hide our bug.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpusleuth.experiments.predict import fix_setting

if TYPE_CHECKING:
    from gpusleuth.diagnosis.finding import Finding
    from gpusleuth.report.model import Report

TOLERANCE = 0.25  # a prediction holds when the measured speed-up is within ±25 % of it


@dataclass
class DemoVerdict:
    measured: float | None  # fixed samples/s ÷ planted samples/s
    predicted: float | None  # the planted run's input finding's speed-up from more workers; None: none predicted
    verdict: str  # "held", "missed", "not judged", "no gain predicted", "no measurement"
    lines: list[str] = field(default_factory=list)  # what the demo prints, in order


def _crowded(report: Report) -> float | None:
    return report.host.crowded_cores() if report.host is not None else None


def _evidence(finding: Finding, name: str) -> float | None:
    """A number among the finding's evidence, by name (None: not there, or not a number)."""
    value = next((e.value for e in finding.evidence if e.name == name), None)
    return float(value) if isinstance(value, (int, float)) else None


def judge(planted: Report, fixed: Report) -> DemoVerdict:
    """The verdict on two built reports (planted, then fixed) of the demo job."""
    if planted.outcomes is None or fixed.outcomes is None:
        return DemoVerdict(None, None, "no measurement", ["no outcomes recorded in one of the runs"])
    a, b = planted.outcomes.steps, fixed.outcomes.steps
    if not (a.samples_per_s and b.samples_per_s):
        return DemoVerdict(None, None, "no measurement", ["no throughput measured in one of the runs"])
    measured = b.samples_per_s / a.samples_per_s
    crowd_a, crowd_b = _crowded(planted), _crowded(fixed)
    load = (f"processes outside the demo used {crowd_a or 0:.1f} cores during the planted run and "
            f"{crowd_b or 0:.1f} during the fixed run")
    finding = next((f for f in planted.findings if f.cause.startswith("input.")), None)
    if finding is None or finding.estimated_gain is None:
        return DemoVerdict(measured, None, "not judged",
                           [f"measured speedup: {measured:.2f}×", "the planted run has no input finding with a "
                            "prediction to check" + (f" ({load})" if crowd_a or crowd_b else "")])
    if not fix_setting(finding.fix, ("num_workers",)):
        free = _evidence(finding, "cores free for loader workers")
        lines = [f"measured speedup: {measured:.2f}×",
                 "predicted: no gain from more loader workers — the planted run found "
                 + (f"{free:.1f} cores free for them" if free is not None else "no core free for them")
                 + f" ({load})"]
        if abs(measured - 1) > TOLERANCE:
            lines.append("the fixed run saw a different host: the speed-up it measured comes from the load "
                         "that changed between the runs, not from the workers alone")
        return DemoVerdict(measured, None, "no gain predicted", lines)
    predicted = finding.estimated_gain.speedup
    off = measured / predicted - 1
    head = [f"measured speedup: {measured:.2f}×",
            f"predicted by the planted run's {finding.cause} finding: {predicted:.2f}×"]
    if abs(off) <= TOLERANCE:
        return DemoVerdict(measured, predicted, "held",
                           head + [f"prediction held: within {abs(off):.0%} (tolerance ±{TOLERANCE:.0%})"
                                   + (f" — on a shared host: {load}" if crowd_a is not None or crowd_b is not None
                                      else "")])
    if crowd_a is not None or crowd_b is not None:
        return DemoVerdict(measured, predicted, "not judged", head + [
            f"not a test of the prediction: {load}; their load, not the fix, is what the two runs differ by. "
            "Run the demo on a quiet host to check it."])
    return DemoVerdict(measured, predicted, "missed", head + [
        f"prediction missed by {off:+.0%} on a quiet host (tolerance ±{TOLERANCE:.0%}): please report it"])
