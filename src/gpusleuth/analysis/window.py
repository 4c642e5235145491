"""The live window: step time, data-wait share and throughput of a process's most recent steps, while the job
runs — the numbers of the live view (``report/live.py``), the Prometheus exporter and the trainer callbacks.

Why here: they must be the report's numbers for the same steps. The steps are carved exactly as the step view
carves them (``analysis/steps.carve``: phase time out of each step, the data wait at most what is left), with
the phases seen so far (``analysis/phases.py``); the median, the wait share of step time and samples per
second of step time are the outcomes' definitions (``analysis/outcomes.py``). Before, the live numbers took
each step's raw span and raw wait: a step holding an evaluation read as a long step with a small wait share.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from gpusleuth.analysis.phases import phase_time
from gpusleuth.analysis.steps import carve
from gpusleuth.run.model import Table

#: a recent step: (start_ns, end_ns, data_wait_ns, samples); samples < 0: unknown
Step = tuple[int, int, int, int]


def window_stats(steps: Iterable[Step], phases: Iterable[tuple[int, int]] = ()
                 ) -> tuple[float | None, float | None, float | None]:
    """(median step s, data-wait share of step time, samples/s) of recent steps, carved of ``phases``
    (``(start_ns, end_ns)`` of every process's phases that ended so far: a phase of any process stalls the
    loop, as the report counts it)."""
    win = np.array(list(steps), np.int64).reshape(-1, 4)
    if not len(win):
        return None, None, None
    lo, hi = int(win[:, 0].min()), int(win[:, 1].max())
    ph = np.array(list(phases), np.int64).reshape(-1, 2)
    table = Table({"name": np.zeros(len(ph), np.int64), "start_ns": ph[:, 0], "end_ns": ph[:, 1]})
    dur, wait = carve(win[:, 0], win[:, 1], win[:, 2], phase_time(table, lo, hi))
    step_s = float(np.median(dur)) / 1e9
    total = int(dur.sum())
    if total <= 0:
        return step_s, None, None
    known = win[:, 3] >= 0
    busy = int(dur[known].sum())
    per_s = float(win[known, 3].sum()) / (busy / 1e9) if known.any() and busy > 0 else None
    return step_s, float(wait.sum()) / total, per_s
