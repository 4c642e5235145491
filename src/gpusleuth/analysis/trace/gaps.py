"""The idle-gap size histogram of one rank: device holes by size, stacked by their dominant cause.

Computed with the rank's analysis (from its painted ``Segments``) rather than when the HTML page is drawn,
because the segments are the one big part of a rank's analysis (hundreds of thousands of intervals for a
long trace): a rank analysed in another process (``pipeline/trace_set.py``) sends back this small histogram
and leaves its segments behind.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .prep import ALL_CATS
from .segments import Segments

#: idle-gap histogram bin edges, µs: 1-3-10 steps from 1 µs to 10 s (outside values go to the end bins)
GAP_EDGES_US = [m * 10 ** k for k in range(0, 7) for m in (1, 3)] + [10_000_000]


@dataclass
class GapHistogram:
    """Device idle gaps of one rank by size, stacked by the gap's dominant cause."""

    rank_label: str
    edges_us: list[float]
    counts: dict[str, list[int]]  # cause -> gaps per bin
    seconds: dict[str, list[float | None]]  # cause -> idle time per bin (None: not finite)
    gaps: int


def _rounded(a: np.ndarray, digits: int) -> list[float | None]:
    a = np.round(np.asarray(a, np.float64), digits)
    return [float(v) if np.isfinite(v) else None for v in a.tolist()]


def gap_histogram(seg: Segments | None, label: str) -> GapHistogram | None:
    """Idle-gap sizes of one rank's segments, by dominant cause, on fixed log bins (None: no gaps)."""
    if seg is None:
        return None
    gaps = seg.idle_gaps()
    if not len(gaps):
        return None
    dur_us = (gaps.end - gaps.start) / 1e3
    edges = np.asarray(GAP_EDGES_US)
    bin_ = np.clip(np.searchsorted(edges, dur_us, side="right") - 1, 0, len(edges) - 2)
    counts: dict[str, list[int]] = {}
    seconds: dict[str, list[float | None]] = {}
    for c in np.unique(gaps.cause):
        m = gaps.cause == c
        counts[ALL_CATS[c]] = np.bincount(bin_[m], minlength=len(edges) - 1).tolist()
        seconds[ALL_CATS[c]] = _rounded(np.bincount(bin_[m], weights=dur_us[m] / 1e6, minlength=len(edges) - 1), 9)
    return GapHistogram(label, [float(e) for e in edges], counts, seconds, len(gaps))
