"""Interval arithmetic on int64 nanoseconds, vectorized (no Python loop per interval): the one union, total and
overlap that phases, steps, communication, requests, host ops and the trace's timeline all use. The trace's
priority painter, built on this union, is in ``analysis/trace/intervals.py``."""

from __future__ import annotations

import numpy as np

I64 = np.int64


def union(starts: np.ndarray, ends: np.ndarray, presorted: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping or touching intervals into sorted, disjoint ones; empty (and inverted) intervals vanish.
    ``presorted``: the starts are known ascending (a trace's rows): no sort, and no check, to pay for."""
    starts = np.asarray(starts, I64)
    ends = np.asarray(ends, I64)
    keep = ends > starts
    if not keep.all():
        starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        return np.empty(0, I64), np.empty(0, I64)
    if not presorted and not ascending(starts):
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    new = np.empty(len(starts), bool)
    new[0] = True
    new[1:] = starts[1:] > reach[:-1]  # a new run starts where the start is past every earlier end
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(starts) - 1]
    return starts[first], reach[last]


def ascending(x: np.ndarray) -> bool:
    """Whether ``x`` is in ascending order (ties allowed): a stable sort would leave it as it is."""
    return bool((x[1:] >= x[:-1]).all())


def overlap_each(qs: np.ndarray, qe: np.ndarray, us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """For each query interval, how much of it is covered by the disjoint sorted union (us, ue)."""
    if len(us) == 0 or len(qs) == 0:
        return np.zeros(len(qs), np.int64)
    # cumulative covered length up to any point x: C(x) = sum(min(max(x - us, 0), ue - us))
    lengths = ue - us
    cum = np.r_[0, np.cumsum(lengths)]

    def covered_until(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(us, x, side="right")  # intervals starting at or before x
        full = cum[np.maximum(i - 1, 0)]
        last_start = us[np.maximum(i - 1, 0)]
        last_len = lengths[np.maximum(i - 1, 0)]
        partial = np.clip(x - last_start, 0, last_len)
        return np.where(i > 0, full + partial, 0)

    covered: np.ndarray = covered_until(np.asarray(qe, np.int64)) - covered_until(np.asarray(qs, np.int64))
    return covered


def total(us: np.ndarray, ue: np.ndarray) -> int:
    """Length of disjoint intervals (a :func:`union`'s)."""
    return int(np.sum(ue - us)) if len(us) else 0


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of any intervals: the time at least one of them covers."""
    return total(*union(starts, ends))


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The intervals cut to [lo, hi]; those left empty dropped."""
    s = np.clip(np.asarray(starts, np.int64), lo, hi)
    e = np.clip(np.asarray(ends, np.int64), lo, hi)
    keep = e > s
    return s[keep], e[keep]
