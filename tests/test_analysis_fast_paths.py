"""The analysis's vectorized fast paths give what their plain definitions give (issue 36: the big-trace report's
post-read time). Each path below replaced a Python loop or a full-array pass per step; these tests hold each to
the slow definition it replaced, on random inputs shaped like the cases that path sees (and the edge cases it
must not change: ties, unsorted rows, blocks split mid-way)."""

from __future__ import annotations

import numpy as np
import pytest

from gpusleuth.analysis import host_ops
from gpusleuth.analysis.trace.kernels import median_by_group


def _periodic_by_definition(codes: np.ndarray, repeat: int, max_body: int) -> list[tuple[int, int, int]]:
    """One body length at a time, one stretch of equal calls at a time: the loop ``_periodic_runs`` was."""
    n = len(codes)
    seen = np.zeros(n, bool)
    runs = []
    for p in range(1, min(n // repeat, max_body) + 1):
        j = 0
        while j < n - p:
            if codes[j] != codes[j + p]:
                j += 1
                continue
            a = j
            while j < n - p and codes[j] == codes[j + p]:
                j += 1
            if j - a >= (repeat - 1) * p and not seen[a:j + p].all():
                runs.append((a, j + p, p))
                seen[a:j + p] = True
    return runs


def _codes(rng: np.random.Generator, case: int) -> np.ndarray:
    if case % 3 == 0:  # noise: short accidental repeats only
        return rng.integers(0, 3, int(rng.integers(0, 400)))
    parts = []  # bodies repeated back to back between noise, as a step's loops are
    for _ in range(int(rng.integers(1, 5))):
        parts.append(rng.integers(-1, 9, int(rng.integers(0, 30))))
        parts.append(np.tile(rng.integers(-1, 5, int(rng.integers(1, 9))), int(rng.integers(1, 40))))
    return np.concatenate(parts).astype(np.int32)


@pytest.mark.parametrize("cells", [host_ops._PERIODIC_CELLS, 1, 997])  # one block, a row a block, blocks split
def test_periodic_runs_are_their_definition(monkeypatch, cells):
    monkeypatch.setattr(host_ops, "_PERIODIC_CELLS", cells)
    rng = np.random.default_rng(36)
    found = 0
    for case in range(400):
        codes = _codes(rng, case)
        repeat, max_body = int(rng.choice([2, 4, 16])), int(rng.choice([1, 3, 512]))
        got = host_ops._periodic_runs(codes, repeat, max_body)
        assert got == _periodic_by_definition(codes, repeat, max_body), case
        found += len(got)
    assert found > 100  # the cases hold loops, not only noise


@pytest.mark.parametrize("shuffled", [False, True])
def test_rows_by_start_answers_as_a_mask_over_every_row(shuffled):
    rng = np.random.default_rng(7)
    n = 3000
    ts = np.sort(rng.integers(0, 100_000, n))
    if shuffled:  # a trace whose rows are not in time order (a foreign source): the answers must not change
        ts = rng.permutation(ts)
    end = ts + rng.choice([0, 5, 50, 4_000], n)
    tid = rng.integers(0, 3, n)
    rows = np.flatnonzero(rng.random(n) < 0.4)
    by = host_ops._RowsByStart(rows, ts, end, tid)
    for lo in rng.integers(-5_000, 105_000, 200):
        hi = int(lo + rng.integers(1, 20_000))
        t = int(rng.integers(0, 3))
        starting = rows[(ts[rows] >= lo) & (ts[rows] < hi) & (tid[rows] == t)]
        overlapping = rows[(end[rows] > lo) & (ts[rows] < hi) & (tid[rows] == t)]
        assert np.array_equal(by.starting(int(lo), hi, t), starting)
        assert np.array_equal(by.overlapping(int(lo), hi, t), overlapping)
    empty = host_ops._RowsByStart(rows[:0], ts, end, tid)
    assert len(empty.starting(0, 10, 0)) == 0 and len(empty.overlapping(0, 10, 0)) == 0


def test_median_by_group_is_numpys_median_bit_for_bit():
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 500))
        values = rng.integers(0, 2**40, n) * rng.choice([1, 1_000_003], n)  # big odd ns counts: rounding shows
        groups = rng.integers(0, int(rng.integers(1, 20)), n)
        uniq, inv = np.unique(groups, return_inverse=True)
        got = median_by_group(inv, values, len(uniq))
        want = np.array([np.median(values[inv == k]) for k in range(len(uniq))])
        assert got.tobytes() == want.tobytes()
