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
