"""Time to target quality, under MLPerf's clock rules.

The clock starts when the job first touches the data (MLLOG ``run_start`` when the job logs it, else the
first DataLoader fetch gpusleuth saw), never pauses, and stops at the first evaluation result that meets
the target — so evaluation time is on the clock. Quality values come from ``gpusleuth.log(metric=…)``
records or from MLLOG events with that key (e.g. ``eval_accuracy``).
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from gpusleuth.errors import GpusleuthError

if TYPE_CHECKING:  # the parsed lines are handed in; analysis reads no file
    from gpusleuth.sources.mllog import MlLog

_OPS: dict[str, Callable[[float, float], bool]] = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}
_TARGET = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(>=|<=|>|<)\s*([-+0-9.eE]+)\s*$")


class TargetError(GpusleuthError):
    pass


@dataclass
class Target:
    metric: str
    op: str
    value: float

    @classmethod
    def parse(cls, text: str) -> "Target":
        m = _TARGET.match(text)
        if not m:
            raise TargetError(f"--target wants METRIC>=VALUE (or <=, >, <), e.g. 'accuracy>=0.9'; got {text!r}")
        return cls(metric=m.group(1), op=m.group(2), value=float(m.group(3)))

    def met(self, v: float) -> bool:
        return _OPS[self.op](v, self.value)


@dataclass
class TimeToTarget:
    target: str
    reached: bool
    time_to_target_s: float | None
    clock_start: str  # what started the clock
    stop_event: str | None
    evaluations: int
    best: float | None
    init_s: float | None  # MLLOG init_start → run_start, reported apart (not on the clock)
    source: str  # "gpusleuth.log" or "MLLOG"


def quality_points(logs: list[dict[str, Any]], mllog: MlLog | None, metric: str) -> tuple[list[tuple[int, float]], str]:
    points = [(int(r["t_ns"]), float(r[metric])) for r in logs
              if metric in r and isinstance(r[metric], (int, float))]
    if points:
        return sorted(points), "gpusleuth.log"
    if mllog:
        points = [(e["t_ns"], float(e["value"])) for e in mllog.events
                  if e["key"] == metric and isinstance(e["value"], (int, float))]
    return sorted(points), "MLLOG"


def compute_time_to_target(target: Target, logs: list[dict[str, Any]], mllog: MlLog | None,
                           first_data_touch_ns: int | None) -> TimeToTarget:
    points, source = quality_points(logs, mllog, target.metric)
    run_start = init_start = None
    if mllog:
        for e in mllog.events:
            if e["key"] == "run_start" and run_start is None:
                run_start = e["t_ns"]
            if e["key"] == "init_start" and init_start is None:
                init_start = e["t_ns"]
    if run_start is not None:
        start, clock = run_start, "MLLOG run_start"
    else:
        start, clock = first_data_touch_ns, "first DataLoader fetch (first data touch)"
    stop = next(((t, v) for t, v in points if target.met(v)), None)
    pick = max if target.op in (">=", ">") else min
    best = pick(v for _, v in points) if points else None
    text = f"{target.metric}{target.op}{target.value:g}"
    ttt = (stop[0] - start) / 1e9 if stop and start is not None else None
    return TimeToTarget(
        target=text, reached=stop is not None, time_to_target_s=ttt, clock_start=clock,
        stop_event=(f"{target.metric}={stop[1]:g}" if stop else None), evaluations=len(points), best=best,
        init_s=(run_start - init_start) / 1e9 if run_start is not None and init_start is not None else None,
        source=source,
    )
