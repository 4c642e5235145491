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


# --- the exposed-time painter (analysis/trace/intervals.py) ---------------------------------------------------

def _active_by_counting(bounds: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per segment, whether any interval covers it: +1/-1 at each interval's edges, summed up."""
    nseg = len(bounds) - 1
    lo, hi = bounds[0], bounds[-1]
    up = np.bincount(np.searchsorted(bounds, np.clip(starts, lo, hi)), minlength=nseg + 1)
    down = np.bincount(np.searchsorted(bounds, np.clip(ends, lo, hi)), minlength=nseg + 1)
    return np.cumsum(up[:-1] - down[:-1]) > 0


def _paint_by_definition(layers, lo, hi, extra):
    """Each segment: the first layer (priority order) whose union covers it; segment by segment."""
    from gpusleuth.analysis.intervals import union

    merged = [union(s, e) for s, e in layers]
    pts = np.concatenate([np.array([lo, hi]), extra, *[np.r_[s, e] for s, e in merged]]).astype(np.int64)
    bounds = np.unique(np.clip(pts, lo, hi))
    label = np.full(max(len(bounds) - 1, 0), len(layers), np.int16)
    for i in range(len(label)):
        for k, (s, e) in enumerate(merged):
            if ((s <= bounds[i]) & (bounds[i] < e)).any():
                label[i] = k
                break
    return bounds, label


def _layer(rng: np.random.Generator, span: int) -> tuple[np.ndarray, np.ndarray]:
    n = int(rng.integers(0, 40))
    s = rng.integers(-span // 10, span + span // 10, n)  # some beyond the window on either side
    e = s + rng.choice([-3, 0, 1, 7, span // 20], n)  # empty, inverted and long ones too
    if rng.random() < 0.5:  # rows in time order, as the trace gives them
        o = np.argsort(s, kind="stable")
        s, e = s[o], e[o]
    return s.astype(np.int64), e.astype(np.int64)


def test_paint_and_tally_are_their_definitions():
    from gpusleuth.analysis.intervals import union
    from gpusleuth.analysis.trace.intervals import active_segments, paint, paint_active, tally

    rng = np.random.default_rng(11)
    for case in range(150):
        span = int(rng.integers(10, 2_000))
        layers = [_layer(rng, span) for _ in range(int(rng.integers(1, 6)))]
        extra = np.sort(rng.integers(0, span, int(rng.integers(0, 8)))).astype(np.int64)
        bounds, label = paint(layers, 0, span, extra)
        want_b, want_l = _paint_by_definition(layers, 0, span, extra)
        assert np.array_equal(bounds, want_b) and np.array_equal(label, want_l), case
        everyone = tuple(range(len(layers)))
        _, _, masks = paint_active(layers, 0, span, extra, active=everyone)
        for k, mask in zip(everyone, masks):  # each layer where it is active, painted over or not
            assert np.array_equal(mask, _active_by_counting(bounds, *union(*layers[k])) if len(bounds) > 1
                                  else np.zeros(0, bool)), case
        if len(bounds) < 2:
            continue
        for s, e in layers:  # raw (overlapping, unsorted) intervals and their union alike
            for iv in ((s, e), union(s, e)):
                assert np.array_equal(active_segments(bounds, *iv), _active_by_counting(bounds, *iv)), case
        # windows: one, or several in time order, edges among the bounds
        for k in (1, 2, 5):
            cut = np.sort(rng.choice(bounds, min(2 * k, len(bounds)), replace=False))
            ws, we = cut[0::2], cut[1::2]
            ws = ws[:len(we)]
            got = tally(bounds, label, len(layers) + 1, ws, we)
            want = np.zeros((len(ws), len(layers) + 1), np.int64)
            for i, (a, b) in enumerate(zip(ws, we)):
                for j in range(len(bounds) - 1):
                    if a <= bounds[j] < b:
                        want[i, label[j]] += bounds[j + 1] - bounds[j]
            assert np.array_equal(got, want), case


# --- the column builder's finish (sources/kineto/columns.py) -----------------------------------------------------

def test_plausibility_from_the_extremes_is_the_per_event_test():
    from gpusleuth.sources.kineto.columns import PLAUSIBLE_US, _all_plausible

    rng = np.random.default_rng(5)
    seen = set()
    for _ in range(2000):
        n = int(rng.integers(1, 6))
        mid = float(rng.choice([0.0, 1.7e15, 3.3e9]))
        # values within a few ulps of a day from the middle, either side: where rounding could decide
        ts = mid + rng.choice([-1, 1], n) * (PLAUSIBLE_US + rng.integers(-4, 5, n) * np.spacing(PLAUSIBLE_US + mid))
        dur = rng.choice([-1, 1], n) * (PLAUSIBLE_US + rng.integers(-2, 3, n) * np.spacing(PLAUSIBLE_US))
        each = (np.abs(ts - mid) <= PLAUSIBLE_US).all() and (np.abs(dur) <= PLAUSIBLE_US).all()
        assert _all_plausible(ts, dur, mid) == each
        seen.add(bool(each))
    assert seen == {True, False}


def _tally_by_segment(bounds, label, nlabels, ws, we):
    """tally as it was: each segment searched among the windows' starts, kept if before that window's end."""
    seg_s = bounds[:-1]
    w = np.searchsorted(ws, seg_s, side="right") - 1
    ok = (w >= 0) & (seg_s < we[np.maximum(w, 0)])
    flat = w[ok].astype(np.int64) * nlabels + label[ok]
    sums = np.bincount(flat, weights=np.diff(bounds)[ok].astype(np.float64), minlength=len(ws) * nlabels)
    return np.rint(sums).astype(np.int64).reshape(len(ws), nlabels)


def test_tally_by_window_runs_is_tally_by_segment_search():
    """Windows in time order as the steps come (tied starts, empty and inverted windows, edges off the
    bounds, windows past either end): the same sums as searching each segment among the windows."""
    from gpusleuth.analysis.trace.intervals import tally

    rng = np.random.default_rng(17)
    for case in range(500):
        bounds = np.unique(rng.integers(0, 1_000, int(rng.integers(2, 60)))).astype(np.int64)
        if len(bounds) < 2:
            continue
        label = rng.integers(0, 4, len(bounds) - 1).astype(np.int16)
        n = int(rng.integers(1, 7))
        ws = np.sort(rng.choice(np.r_[bounds, rng.integers(-50, 1_050, 5)], n)).astype(np.int64)
        we = (ws + rng.choice([-5, 0, 10, 100, 400], n)).astype(np.int64)
        if case % 2:  # steps as prep makes them: each clipped at the next one's start
            we[:-1] = np.minimum(we[:-1], ws[1:])
        got = tally(bounds, label, 4, ws, we)
        assert np.array_equal(got, _tally_by_segment(bounds, label, 4, ws, we)), case
