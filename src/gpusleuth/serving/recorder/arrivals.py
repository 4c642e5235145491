"""When an open-loop level's requests are due: ``arrival_offsets`` — constant, Poisson or gamma gaps
(``--arrivals``; gamma's ``cv`` is the spread of the gaps: 1 is Poisson, more is burstier), drawn from the
generator's seeded ``numpy`` generator so a run can be repeated. The schedule alone, apart from the generator
that keeps it (``serving/recorder/loadgen.py``), so it can be read and tested as arithmetic.
"""

from __future__ import annotations

import math

import numpy as np

ARRIVALS = ("constant", "poisson", "gamma")


def arrival_offsets(rate: float, duration_s: float, kind: str, cv: float, rng: np.random.Generator,
                    cap: int | None = None) -> np.ndarray:
    """Seconds from the level's start at which its requests are due: every 1/rate (constant), exponential
    gaps (Poisson), or gamma gaps of mean 1/rate and coefficient of variation ``cv`` (shape 1/cv²)."""
    n = math.ceil(duration_s * rate)
    if kind == "constant":
        out = np.arange(n, dtype=np.float64) / rate
    else:
        draw = max(int(n * 1.5 + 10 * math.sqrt(n) + 10), 16)
        if kind == "poisson":
            gaps = rng.exponential(1.0 / rate, draw)
        else:
            shape = 1.0 / (cv * cv)
            gaps = rng.gamma(shape, 1.0 / (rate * shape), draw)
        out = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
        out = out[out < duration_s]
    return out[:cap] if cap is not None else out
