"""The one interval arithmetic (analysis/intervals.py) against its definition, point by point: the union the
phases, steps, communication, requests, host ops and the trace's painter all take. It had three copies, and one
turned an inverted interval (end before start, a damaged row) into a run of negative length."""
from __future__ import annotations

import numpy as np
import pytest

from gpusleuth.analysis import intervals as iv


def _covered(starts, ends, span) -> np.ndarray:
    """Which integer instants [t, t+1) of 0..span some interval covers."""
    on = np.zeros(span, bool)
    for s, e in zip(starts, ends):
        if e > s:
            on[max(s, 0):max(e, 0)] = True
    return on


@pytest.mark.parametrize("seed", range(40))
def test_union_overlap_and_length_match_the_instants_they_cover(seed):
    rng = np.random.default_rng(seed)
    span = 400
    n = int(rng.integers(0, 30))
    s = rng.integers(0, span - 20, n)
    e = s + rng.choice([-5, 0, 1, 3, 17, 60], n)  # inverted, empty, short and long ones
    if seed % 2:
        o = np.argsort(s, kind="stable")
        s, e = s[o], e[o]
    us, ue = iv.union(s, e, presorted=bool(seed % 2))
    on = _covered(s, e, span + 100)  # the longest end past span
    assert (ue > us).all() and (us[1:] > ue[:-1]).all()  # disjoint, sorted, none empty; touching ones merged
    assert np.array_equal(_covered(us, ue, span + 100), on)
    assert iv.union_length(s, e) == on.sum() == iv.total(us, ue)
    qs = rng.integers(0, span - 50, 10)
    qe = qs + rng.integers(0, 50, 10)
    assert iv.overlap_each(qs, qe, us, ue).tolist() == [int(on[a:b].sum()) for a, b in zip(qs, qe)]


def test_an_inverted_interval_covers_nothing():
    assert iv.union_length(np.array([10, 50]), np.array([5, 60])) == 10
    us, ue = iv.union(np.array([10]), np.array([5]))
    assert len(us) == len(ue) == 0
