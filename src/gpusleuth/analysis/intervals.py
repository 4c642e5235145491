"""Small interval arithmetic on numpy arrays (ns). Used to carve phases out of steps and wall time."""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping intervals; returns sorted, disjoint (starts, ends)."""
    if len(starts) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s = np.asarray(starts, np.int64)[order]
    e = np.maximum.accumulate(np.asarray(ends, np.int64)[order])
    # a new run starts where the start is past every earlier end
    new = np.r_[True, s[1:] > e[:-1]]
    idx = np.flatnonzero(new)
    return s[idx], np.r_[e[idx[1:] - 1], e[-1]]


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
    return int(np.sum(ue - us)) if len(us) else 0


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The intervals cut to [lo, hi]; those left empty dropped."""
    s = np.clip(np.asarray(starts, np.int64), lo, hi)
    e = np.clip(np.asarray(ends, np.int64), lo, hi)
    keep = e > s
    return s[keep], e[keep]
