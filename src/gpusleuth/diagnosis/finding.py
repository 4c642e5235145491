"""A finding: one diagnosed cause with its evidence, estimated gain, fix and confidence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gpusleuth.diagnosis.taxonomy import CAUSES, SEVERITIES
from gpusleuth.diagnosis.taxonomy import Severity as Severity  # named by the rules, which see only finding/facts

#: how sure a finding is (the JSON's ``confidence``): a rule lowers it where its evidence is indirect
Confidence = Literal["low", "medium", "high"]
CONFIDENCES: tuple[Confidence, ...] = ("low", "medium", "high")


@dataclass
class Evidence:
    """One number and where it came from (so a user can check it)."""

    name: str
    value: float | str | None
    unit: str = ""
    source: str = ""


@dataclass
class Gain:
    """What fixing the cause is worth, and how that was estimated."""

    step_share: float  # share of step time recoverable (0..1)
    wall_share: float  # share of wall time recoverable (0..1)
    seconds_per_run: float
    speedup: float  # predicted throughput ratio after the fix
    method: str
    dollars_per_run: float | None = None  # seconds_per_run at the run's price (None: no price known)


@dataclass
class Finding:
    cause: str
    severity: Severity
    title: str
    summary: str
    evidence: list[Evidence]
    fix: str
    estimated_gain: Gain | None = None
    confidence: Confidence = "medium"
    missing: list[str] = field(default_factory=list)  # data this rule lacked, and how to get it

    def __post_init__(self) -> None:
        if self.cause not in CAUSES:
            raise ValueError(f"unknown cause {self.cause!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")
        if self.confidence not in CONFIDENCES:
            raise ValueError(f"unknown confidence {self.confidence!r}")

    @property
    def rank_key(self) -> tuple[int, float]:
        sev = SEVERITIES.index(self.severity)
        gain = self.estimated_gain.wall_share if self.estimated_gain else 0.0
        return (-sev, -gain)


@dataclass
class Missing:
    """A rule that could not be evaluated: what it needed and how to get it."""

    rule: str
    needs: str
    how: str
    cause: str | None = None  # the cause this rule would have named (places it in the debugging order)
    # the data source it lacked, in a few words ("GPU telemetry", "a profiler trace"): the report collapses
    # the not-evaluated rules to one line per source
    data: str = ""
    # the rule judges a training loop's steps: on a server under load, which has none, it does not apply
    # (diagnosis.engine.not_applicable) rather than lack data
    training_only: bool = False

    def __post_init__(self) -> None:
        if not self.data:
            self.data = self.needs.split(" (", 1)[0]
