"""What both trainer callbacks share: explicit steps and phases through the public API, and live numbers.

Phases are opened only when no phase of that name is open already (``gpusleuth.in_phase``): if the hook
opened its automatic ``eval`` at ``model.eval()`` first, the callback leaves it be, so time is never
counted twice. Live numbers are gpusleuth's own — this process's step events, tailed from the run
directory (sources/livetail.py) — so what the trainer logs is what the report will say.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import gpusleuth
from gpusleuth.api import in_phase
from gpusleuth.run.layout import RunDir

if TYPE_CHECKING:  # imported where it runs: only under `gpusleuth run`
    from gpusleuth.sources.livetail import StepTotals

PREFIX = "gpusleuth/"


class Phases:
    """Phases this callback opened, by name; ``end`` closes only its own."""

    def __init__(self) -> None:
        self.open: dict[str, gpusleuth.phase] = {}

    def begin(self, name: str) -> None:
        if name in self.open or in_phase(name):
            return
        p = gpusleuth.phase(name)
        p.__enter__()
        self.open[name] = p

    def end(self, name: str) -> None:
        p = self.open.pop(name, None)
        if p is not None:
            p.__exit__(None, None, None)

    def end_all(self) -> None:
        for name in list(self.open):
            self.end(name)


class LiveNumbers:
    """Recent step time, data-wait share and throughput of this process, as gpusleuth recorded them."""

    def __init__(self) -> None:
        run_dir = os.environ.get("GPUSLEUTH_RUN_DIR")
        self.tail: StepTotals | None = None
        if run_dir:
            from gpusleuth.sources.livetail import StepTotals

            self.tail = StepTotals(RunDir(Path(run_dir)).raw)
        self.pid = os.getpid()

    def numbers(self) -> dict[str, float]:
        """Empty when not recording or before the hook's first flush (about a second after the first step)."""
        if self.tail is None:
            return {}
        from gpusleuth.analysis.window import window_stats

        from gpusleuth.api import flush

        flush()  # the steps up to now, not up to the hook's last periodic write
        self.tail.poll()
        if self.pid not in self.tail.counts:
            return {}
        out = {"steps": float(self.tail.counts[self.pid])}
        step_s, wait_share, per_s = window_stats(self.tail.steps[self.pid], self.tail.phases)
        for key, value in (("step_time_s", step_s), ("data_wait_share", wait_share), ("samples_per_s", per_s)):
            if value is not None:
                out[key] = float(value)
        return {PREFIX + k: v for k, v in out.items()}
