"""Ground truth a workload measures about itself, printed as one machine-readable line.

Every workload in this folder times its own steps, optimizer, input fetch and phases with
``time.perf_counter_ns`` and prints ``GPUSLEUTH_TRUTH {json}`` at the end (to stderr, so that the job's
stdout stays the job's). The tests run the workload under ``gpusleuth run`` and compare gpusleuth's numbers
with these: the job's own clock is the referee, not a number we expected.
"""

from __future__ import annotations

import json
import sys
import time

MARK = "GPUSLEUTH_TRUTH "


class Truth:
    """Accumulates named durations (seconds) and counts; ``emit()`` prints them once."""

    def __init__(self, name: str):
        self.name = name
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.values: dict[str, object] = {}
        self.steps: list[float] = []

    def add(self, key: str, seconds: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + seconds
        self.counts[key] = self.counts.get(key, 0) + 1

    def timer(self, key: str) -> "_Timer":
        return _Timer(self, key)

    def emit(self) -> None:
        out = {"workload": self.name, "sums_s": self.sums, "counts": self.counts, "steps": len(self.steps),
               "step_s_sum": sum(self.steps), **self.values}
        if self.steps:
            s = sorted(self.steps)
            out["step_s_p50"] = s[len(s) // 2]
        sys.stderr.write(MARK + json.dumps(out) + "\n")
        sys.stderr.flush()


class _Timer:
    def __init__(self, truth: Truth, key: str):
        self.truth, self.key = truth, key

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.truth.add(self.key, time.perf_counter() - self.t0)
        return False


def timed_optimizer(cls, truth: Truth, key: str = "optimizer"):
    """A subclass of the optimizer class ``cls`` whose ``step`` times its own work — the closure it is
    handed (Lightning runs forward and backward in it) taken out. torch wraps a subclass's ``step`` with
    its step hooks, so this clock runs inside them: it times the optimizer, not the hooks around it."""

    class Timed(cls):
        def step(self, closure=None):
            t0 = time.perf_counter()
            inside = [0.0]
            if closure is not None:
                real = closure

                def closure():
                    c0 = time.perf_counter()
                    try:
                        return real()
                    finally:
                        inside[0] += time.perf_counter() - c0
            loss = super().step(closure)
            truth.add(key, time.perf_counter() - t0 - inside[0])
            return loss

    Timed.__name__ = "Timed" + cls.__name__
    return Timed


def parse(text: str) -> dict:
    """The truth line from a job's output (the last one wins)."""
    found = None
    for line in text.splitlines():
        if line.startswith(MARK):
            found = json.loads(line[len(MARK):])
    if found is None:
        raise ValueError("no " + MARK.strip() + " line in the job's output")
    return found
