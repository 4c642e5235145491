"""Vectorized interval arithmetic on int64 nanoseconds (no Python loop per interval).

The priority painter is the core of the exposed-time partition: every instant of a window gets exactly
one label — the highest-priority category active then — so per-window sums are exact by construction
(each elementary segment between two boundaries is counted once, in integer ns).
"""

from __future__ import annotations

import numpy as np

I64 = np.int64


def union(starts: np.ndarray, ends: np.ndarray, presorted: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping/touching intervals into sorted disjoint ones. Empty intervals vanish."""
    starts = np.asarray(starts, I64)
    ends = np.asarray(ends, I64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        return np.empty(0, I64), np.empty(0, I64)
    if not presorted:
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.empty(len(starts), bool)
    new[0] = True
    new[1:] = starts[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(starts) - 1]
    return starts[first], reach[last]


def total(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union."""
    s, e = union(starts, ends)
    return int((e - s).sum())


def intersect_len(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Length of (union a) ∩ (union b); both given as disjoint sorted intervals."""
    (as_, ae), (bs, be) = a, b
    if len(as_) == 0 or len(bs) == 0:
        return 0
    # covered length of b inside each interval of a, via the cumulative length of b up to a point
    cum = np.r_[0, np.cumsum(be - bs)]

    def covered_until(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(bs, x, side="right")  # b intervals starting at or before x
        partial = np.where(i > 0, np.minimum(x - bs[np.maximum(i - 1, 0)], (be - bs)[np.maximum(i - 1, 0)]), 0)
        return np.asarray(cum[np.maximum(i - 1, 0)] * (i > 0) + np.maximum(partial, 0))

    return int((covered_until(ae) - covered_until(as_)).sum())


def covers(starts: np.ndarray, ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """For sorted disjoint intervals, whether each point lies in one (start inclusive)."""
    if len(starts) == 0:
        return np.zeros(len(points), bool)
    i = np.searchsorted(starts, points, side="right") - 1
    return (i >= 0) & (ends[np.maximum(i, 0)] > points)


def paint(layers: list[tuple[np.ndarray, np.ndarray]], lo: int, hi: int,
          extra_bounds: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Label every instant of ``[lo, hi)`` with the first layer (priority order) active there.

    Returns ``(bounds, label)``: segments ``[bounds[i], bounds[i+1])`` carry ``label[i]``, an index into
    ``layers``, or ``len(layers)`` where none is active. Coverage per layer is a +1/-1 difference array
    over the segment boundaries and a cumulative sum — O(n log n) in total, never a loop per interval.
    """
    merged = [union(s, e) for s, e in layers]
    parts = [np.array([lo, hi], I64)]
    for s, e in merged:
        parts += [s, e]
    if extra_bounds is not None:
        parts.append(np.asarray(extra_bounds, I64))
    bounds = np.sort(np.clip(np.concatenate(parts), lo, hi))
    bounds = bounds[np.r_[True, bounds[1:] != bounds[:-1]]] if len(bounds) else bounds
    nseg = len(bounds) - 1
    label = np.full(max(nseg, 0), len(layers), np.int16)
    if nseg <= 0:
        return bounds, label
    unset = np.ones(nseg, bool)
    for k, (s, e) in enumerate(merged):
        if len(s) == 0:
            continue
        active = active_segments(bounds, s, e)
        hit = active & unset
        label[hit] = k
        unset &= ~active
    return bounds, label


def active_segments(bounds: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which segments ``[bounds[i], bounds[i+1])`` lie inside the union of the intervals, whose edges
    must be among ``bounds`` (true for :func:`paint`'s bounds)."""
    nseg = len(bounds) - 1
    if nseg <= 0 or len(starts) == 0:
        return np.zeros(max(nseg, 0), bool)
    lo, hi = bounds[0], bounds[-1]
    up = np.bincount(np.searchsorted(bounds, np.clip(starts, lo, hi)), minlength=nseg + 1)
    down = np.bincount(np.searchsorted(bounds, np.clip(ends, lo, hi)), minlength=nseg + 1)
    return np.cumsum(up[:-1] - down[:-1]) > 0


def tally(bounds: np.ndarray, label: np.ndarray, nlabels: int, win_starts: np.ndarray,
          win_ends: np.ndarray) -> np.ndarray:
    """Sum painted segment lengths per (window, label). Windows must not overlap and their edges must
    be among ``bounds`` (pass them as ``extra_bounds`` to :func:`paint`) so each sum is exact."""
    out = np.zeros((len(win_starts), nlabels), I64)
    if len(bounds) < 2 or len(win_starts) == 0:
        return out
    seg_s = bounds[:-1]
    length = np.diff(bounds)
    w = np.searchsorted(win_starts, seg_s, side="right") - 1
    ok = (w >= 0) & (seg_s < win_ends[np.maximum(w, 0)])
    flat = w[ok].astype(I64) * nlabels + label[ok]
    sums = np.bincount(flat, weights=length[ok].astype(np.float64), minlength=len(win_starts) * nlabels)
    return np.rint(sums).astype(I64).reshape(len(win_starts), nlabels)
