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

#: a load band below this is no load difference (sampling noise of the CPU shares)
LOAD_MIN = 0.05
#: the least CPU a run is taken to have had: a job left with nothing still ran, slowly
MIN_LEFT_CORES = 0.05
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


def load_band(cores: float | None, job_cores: tuple[float | None, float | None],
              foreign_cores: tuple[float | None, float | None]) -> float:
    """± relative change that a difference in *other* processes' CPU use between two runs can explain alone.

    A job gets at most what the others leave it: ``min(its demand, cores − others)``, its demand being the
    larger of the cores it used in the two runs (the freer run shows it). The ratio of those two capacities
    is the speed change the load alone can make — for the same configuration measured 30 minutes apart on
    a shared 2-core host, +56 % read "beyond noise" against a ±15 % floor (issue 27). On a saturated host
    ``cores − others`` is what the job got, so the ratio is that of the job's own CPU. 0 when the capacities
    agree within :data:`LOAD_MIN` or the load was not measured."""
    fa, fb = foreign_cores
    ja, jb = job_cores
    if not cores or fa is None or fb is None:
        return 0.0
    demand = max(j for j in (ja, jb, MIN_LEFT_CORES) if j is not None)
    left_a = max(min(demand, cores - fa), MIN_LEFT_CORES)
    left_b = max(min(demand, cores - fb), MIN_LEFT_CORES)
    band = max(left_a, left_b) / min(left_a, left_b) - 1
    return band if band >= LOAD_MIN else 0.0


def load_statement(labels: tuple[str, str], cores: float, foreign_cores: tuple[float, float], band: float) -> str:
    """The sentence naming a comparison across different host load."""
    return (f"The runs saw different host load: other processes used {foreign_cores[0]:.1f} of {cores:g} cores "
            f"while {labels[0]} ran and {foreign_cores[1]:.1f} while {labels[1]} ran, which alone can change a "
            f"CPU-bound job's speed by ±{band:.0%}; the band includes it")
