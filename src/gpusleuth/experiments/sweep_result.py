"""What a sweep produced: each attempt, each configuration's bands, the knees, the prediction checks.

A leaf: the runner that fills these, the prediction check that reads them (``predict.py``) and the renderer
(``render/sweep_console.py``) all import it, and it imports none of them, so no import cycle runs through the
sweep's result types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

from gpusleuth.experiments.maxbatch import MaxBatchResult
from gpusleuth.experiments.measure import Measurement
from gpusleuth.experiments.stats import Band, Knee, Verdict


@dataclass
class Attempt:
    repeat: int
    run_dir: str
    exit_code: int | None
    ok: bool
    wall_s: float
    stopped_by: str | None = None
    oom: bool = False
    error: str | None = None  # why it failed, in words
    stderr_tail: list[str] = field(default_factory=list)
    measurement: Measurement | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["measurement"] = self.measurement.to_dict() if self.measurement else None
        return d


@dataclass
class ConfigResult:
    id: str
    label: str
    config: dict[str, str]
    routes: dict[str, str]
    attempts: list[Attempt] = field(default_factory=list)
    throughput: Band | None = None  # samples/s (or steps/s when samples are unknown)
    step_p50: Band | None = None
    unit: str = "samples/s"

    @property
    def ok_attempts(self) -> list[Attempt]:
        return [a for a in self.attempts if a.ok and a.measurement is not None]

    @property
    def measurements(self) -> list[Measurement]:
        """The measurements of the attempts that succeeded (``ok_attempts``'), in order."""
        return [a.measurement for a in self.attempts if a.ok and a.measurement is not None]

    @property
    def crashed(self) -> bool:
        return bool(self.attempts) and not any(a.ok for a in self.attempts)

    def median(self, metric: str) -> float | None:
        vals = sorted(v for v in (getattr(m, metric) for m in self.measurements) if v is not None)
        if not vals:
            return None
        n = len(vals)
        return float(vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "label": self.label, "config": self.config, "routes": self.routes,
            "crashed": self.crashed, "unit": self.unit,
            "throughput": self.throughput.to_dict() if self.throughput else None,
            "step_p50_s": self.step_p50.to_dict() if self.step_p50 else None,
            "attempts": [a.to_dict() for a in self.attempts],
        }


class BatchKnee(TypedDict):
    """The throughput curve over the batch parameter for one combination of the other parameters, and its knee."""

    group: str  # the other parameters' values ("num_workers=4"), or "all"
    param: str  # the batch parameter's name
    knee: Knee
    curve: list[list[float | None]]  # [batch, throughput or None where it crashed], by batch


@dataclass
class PredictionCheck:
    cause: str
    baseline: str  # where the prediction and the baseline throughput came from
    predicted_speedup: float
    predicted_setting: dict[str, str]  # what the finding's fix asked for (parsed from its text)
    measured_config: str | None
    measured_speedup: float | None
    exact: bool  # the measured configuration is the predicted setting
    verdict: str
    # ± relative change the measurement can resolve: the repeats' band (or the one-run floor) of the baseline
    # and the picked configuration, widened by what a difference in host load between them explains
    band: float | None = None
    load_note: str | None = None  # the baseline was recorded under other host load: how much

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class SweepResult:
    command: list[str]
    params: list[tuple[str, list[str]]]
    out_dir: str
    repeat: int
    steps: int | None
    warmup: int
    duration_s: float | None
    configs: list[ConfigResult]
    verdict: Verdict | None = None
    knees: list[BatchKnee] = field(default_factory=list)
    predictions: list[PredictionCheck] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)
    max_batch: MaxBatchResult | None = None  # when --max-batch ran
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": "gpusleuth.sweep/1",
            "command": self.command, "params": [{"name": n, "values": v} for n, v in self.params],
            "out_dir": self.out_dir, "repeat": self.repeat, "steps": self.steps, "warmup": self.warmup,
            "duration_s": self.duration_s, "wall_s": self.wall_s,
            "configs": [c.to_dict() for c in self.configs],
            "verdict": self.verdict.to_dict() if self.verdict else None,
            "knees": [{"group": k["group"], "param": k["param"], "curve": k["curve"], **k["knee"].to_dict()}
                      for k in self.knees],
            "predictions": [p.to_dict() for p in self.predictions],
            "caveats": self.caveats,
            "max_batch": self.max_batch.to_dict() if self.max_batch else None,
        }
