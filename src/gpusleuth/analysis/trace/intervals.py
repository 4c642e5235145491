"""The trace timeline's priority painter, on the union of ``analysis/intervals.py`` (int64 ns, vectorized).

The priority painter is the core of the exposed-time partition: every instant of a window gets exactly
one label — the highest-priority category active then — so per-window sums are exact by construction
(each elementary segment between two boundaries is counted once, in integer ns).
"""

from __future__ import annotations

import numpy as np

from gpusleuth.analysis.intervals import I64, ascending, union


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
    ``layers``, or ``len(layers)`` where none is active. See :func:`paint_active`."""
    bounds, label, _ = paint_active(layers, lo, hi, extra_bounds)
    return bounds, label


def paint_active(layers: list[tuple[np.ndarray, np.ndarray]], lo: int, hi: int,
                 extra_bounds: np.ndarray | None = None,
                 active: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """:func:`paint`, and for each layer index in ``active`` the segments where that layer is active
    (whatever the layers before it), as :func:`active_segments` gives them.

    The bounds are every layer's (merged) edges, sorted once; that sort also says where each edge falls
    among the bounds, so a layer's coverage is its runs of segments between its edges — O(n log n) in
    total, never a loop per interval, no search per edge."""
    merged = [union(s, e) for s, e in layers]
    parts = [np.array([lo, hi], I64)]
    for s, e in merged:
        parts += [s, e]
    if extra_bounds is not None:
        parts.append(np.asarray(extra_bounds, I64))
    # (each full-size temporary is dropped as soon as it is used: this is the report's peak of memory)
    points = np.concatenate(parts)
    np.clip(points, lo, hi, out=points)
    order = np.argsort(points, kind="stable")
    ranked = points[order]
    del points
    first = np.empty(len(ranked), bool)
    first[0] = True
    np.not_equal(ranked[1:], ranked[:-1], out=first[1:])
    bounds = ranked[first]
    del ranked
    nseg = len(bounds) - 1
    label = np.full(max(nseg, 0), len(layers), np.int16)
    if nseg <= 0:
        return bounds, label, [np.zeros(0, bool) for _ in active]
    rank = np.cumsum(first, dtype=np.intp)
    rank -= 1
    where = np.empty(len(first), np.intp)  # each point's index in bounds
    where[order] = rank
    del order, rank, first
    offset = np.cumsum([2] + [2 * len(s) for s, _ in merged])

    def layer_active(k: int) -> np.ndarray:
        """A union's intervals are disjoint and in order: their edges' indices ascend."""
        at, n = int(offset[k]), len(merged[k][0])
        edges = np.empty(2 * n, np.intp)
        edges[0::2], edges[1::2] = where[at:at + n], where[at + n:at + 2 * n]
        return _runs_between(edges, nseg)

    kept: dict[int, np.ndarray] = {}
    # lowest priority first, each layer over the ones before it: the first active layer's label stays
    for k in range(len(merged) - 1, -1, -1):
        if len(merged[k][0]):
            mask = layer_active(k)
            label[mask] = k
            if k in active:
                kept[k] = mask
    return bounds, label, [kept[k] if k in kept else np.zeros(nseg, bool) for k in active]


def _runs_between(at: np.ndarray, nseg: int) -> np.ndarray:
    """Per segment, whether it lies in one of the runs ``[at[0], at[1])``, ``[at[2], at[3])``… (ascending
    segment indices): alternate runs of False and True."""
    runs = np.diff(at, prepend=0, append=nseg)
    on = np.zeros(len(runs), bool)
    on[1::2] = True
    return np.repeat(on, runs)


def active_segments(bounds: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which segments ``[bounds[i], bounds[i+1])`` lie inside the union of the intervals, whose edges
    must be among ``bounds`` (true for :func:`paint`'s bounds)."""
    nseg = len(bounds) - 1
    if nseg <= 0 or len(starts) == 0:
        return np.zeros(max(nseg, 0), bool)
    lo, hi = bounds[0], bounds[-1]
    edges = np.empty(2 * len(starts), I64)
    edges[0::2], edges[1::2] = starts, ends
    if ascending(edges):  # disjoint intervals in order (a union's): each is one run of segments
        return _runs_between(np.searchsorted(bounds, np.clip(edges, lo, hi)), nseg)
    up = np.bincount(np.searchsorted(bounds, np.clip(starts, lo, hi)), minlength=nseg + 1)
    down = np.bincount(np.searchsorted(bounds, np.clip(ends, lo, hi)), minlength=nseg + 1)
    return np.cumsum(up[:-1] - down[:-1]) > 0


def tally(bounds: np.ndarray, label: np.ndarray, nlabels: int, win_starts: np.ndarray,
          win_ends: np.ndarray) -> np.ndarray:
    """Sum painted segment lengths per (window, label). Windows must be in time order and not overlap,
    and their edges must be among ``bounds`` (pass them as ``extra_bounds`` to :func:`paint`) so each sum
    is exact.

    A segment counts for the last window starting at or before it, if it starts before that window's end:
    window ``i`` takes the segments starting in ``[win_starts[i], min(win_starts[i+1], win_ends[i]))``, a
    run of segment indices found by a search per window edge (never a search per segment)."""
    out = np.zeros((len(win_starts), nlabels), I64)
    if len(bounds) < 2 or len(win_starts) == 0:
        return out
    seg_s = bounds[:-1]
    first = np.searchsorted(seg_s, win_starts, side="left")
    stop = np.minimum(np.searchsorted(seg_s, win_ends, side="left"), np.append(first[1:], len(seg_s)))
    stop = np.maximum(stop, first)  # a window that ends before it starts takes none
    i0, i1 = int(first[0]), int(stop[-1])
    if i1 <= i0:
        return out
    length = (bounds[i0 + 1:i1 + 1] - bounds[i0:i1]).astype(np.float64)
    label = label[i0:i1]
    n = len(win_starts)
    if n == 1:  # one window: every segment left is inside it
        sums = np.bincount(label, weights=length, minlength=nlabels)
        return np.rint(sums).astype(I64).reshape(1, nlabels)
    # per segment in [i0, i1): its window, or -1 between windows (runs: window 0, gap, window 1, …)
    edges = np.empty(2 * n, np.intp)
    edges[0::2], edges[1::2] = first, stop
    vals = np.full(2 * n - 1, -1, np.intp)
    vals[0::2] = np.arange(n)
    w = np.repeat(vals, np.diff(edges))
    ok = w >= 0
    flat = w[ok].astype(I64) * nlabels + label[ok]
    sums = np.bincount(flat, weights=length[ok], minlength=n * nlabels)
    return np.rint(sums).astype(I64).reshape(n, nlabels)
