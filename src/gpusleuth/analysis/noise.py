"""The one noise model that ``compare`` and ``sweep`` share: when is a difference a difference?

Two sources of noise, and a verdict needs both:

* **within a run** — the spread of its steady steps: the standard error of the median step time,
  ``SE ≈ 1.2533·σ/√n`` with σ from the MAD. Small for long runs, and blind to what changes from one run to
  the next (another job on the host, clocks, page cache, which core the scheduler picked);
* **from run to run** — the spread of repeats of the same job. With repeats (``sweep --repeats R``) it is
  measured: the band is the repeats' min–max, never narrower than :data:`REPEAT_FLOOR`. With one run per
  side it cannot be measured, so the band is at least :data:`SINGLE_RUN_FLOOR` and the report says so:
  "one run per side cannot separate less than X %".

:data:`SINGLE_RUN_FLOOR` comes from identical runs on the machines gpusleuth is tested on: two identical
runs differed by 14.6 % (issue 12), and six identical runs of ``workloads/memmap_lm.py`` under
``gpusleuth run`` on a shared 2-core machine had step-time medians with a CV of 27 % (BENCHMARKS.md,
"Run-to-run noise"). A quiet dedicated machine does better; repeats measure yours.
"""

from __future__ import annotations

import math

import numpy as np

from gpusleuth.analysis.steps import robust_sigma

#: a load band below this is no load difference (sampling noise of 10 Hz CPU and state samples)
LOAD_MIN = 0.10
#: the least share of its runnable time a run is taken to have run: a job left with nothing still ran
MIN_ATTAINED = 0.05
REPEAT_FLOOR = 0.03  # ± share of the median a band from ≥ 2 repeats is at least
SINGLE_RUN_FLOOR = 0.15  # ± share one run per side cannot resolve (run-to-run variation of identical runs)


def step_se_rel(secs: np.ndarray) -> float | None:
    """Relative standard error of the median step time of one run's steady steps (None under 3 steps)."""
    if len(secs) < 3:
        return None
    med = float(np.median(secs))
    if med <= 0:
        return None
    return 1.2533 * robust_sigma(secs) / math.sqrt(len(secs)) / med


def single_run_band(se_rel_a: float | None, se_rel_b: float | None) -> float:
    """± relative change two single runs can resolve: two combined standard errors of their medians, never
    below the run-to-run floor."""
    within = 2 * math.hypot(se_rel_a, se_rel_b) if se_rel_a is not None and se_rel_b is not None else 0.0
    return max(within, SINGLE_RUN_FLOOR)


def band_statement(band: float, within: float | None = None) -> str:
    """The sentence that goes next to a one-run-per-side comparison."""
    basis = (f"within-run spread gives ±{within:.1%}, " if within is not None and within < band else "")
    return (f"one run per side cannot separate less than {band:.0%} ({basis}the run-to-run floor of identical "
            f"runs is ±{SINGLE_RUN_FLOOR:.0%}); repeat the runs to measure the noise")


def repeats_floor(n: int) -> float:
    """The narrowest band ``n`` repeats may claim: one repeat measures no run-to-run spread at all."""
    return SINGLE_RUN_FLOOR if n <= 1 else REPEAT_FLOOR


def load_band(attained: tuple[float | None, float | None]) -> float:
    """± relative change that a difference in host load between two runs can explain alone: the ratio of
    how much of its runnable time the job's loop got a CPU in each run (``HostSummary.main_cpu_attained``).
    A CPU-bound loop given 0.22 of a core in one run and 0.10 in the other runs about 2.2× slower for that
    alone — for one configuration measured 30 minutes apart on a shared host, "+56 %, beyond noise" against
    a ±15 % floor (issue 27). Host CPU shares cannot tell this: on a saturated host "cores − others" is just
    what the job used, whether it wanted more or slept by design. 0 below :data:`LOAD_MIN` or unmeasured."""
    a, b = attained
    if a is None or b is None:
        return 0.0
    a, b = max(a, MIN_ATTAINED), max(b, MIN_ATTAINED)
    band = max(a, b) / min(a, b) - 1
    return band if band >= LOAD_MIN else 0.0


def load_statement(labels: tuple[str, str], attained: tuple[float, float], band: float) -> str:
    """The sentence naming a comparison across different host load."""
    return (f"The runs saw different host load: the training loop got a CPU for {attained[0]:.0%} of the time "
            f"it was ready to run in {labels[0]} and {attained[1]:.0%} in {labels[1]} (other processes took the "
            f"rest), which alone changes a CPU-bound loop's speed by up to ±{band:.0%}; the band includes it")
