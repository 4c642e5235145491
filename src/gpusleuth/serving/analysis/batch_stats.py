"""What a batching server's batches were: ``batch_stats(join, run) -> BatchStats`` over the forwards
``serving/analysis/batching.py`` joined to the requests they served — requests per forward (and per forward over time,
``BatchSeries``, the HTML report's chart), the requests' wait for their batch split into queued behind earlier
batches and held while the batcher collected more, a request's share of its forwards, prefill against decode
for a generation loop — and the sentence for requests that could not be joined.

Kept beside the join rather than in ``serving/analysis/requests.py``: the join says which forward served which request,
this module what those batches were; ``serving/analysis/requests.py`` only adds the result to a server's requests
(``RequestAnalysis.batching``) and cuts the sizes per load level with ``batch_sizes``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpusleuth.serving.analysis.batching import BatchJoin
from gpusleuth.run.model import Run


@dataclass
class LevelMark:
    """Where a load level began on a series' time axis (``BatchSeries.levels``)."""

    concurrency: int
    rate: float
    start_s: float  # seconds after the series' origin


@dataclass
class BatchSeries:
    """Requests per batch forward over time — how full the batcher's forwards were as the load changed.

    The joined forwards (those that served at least one request) binned on their start time: per bin the
    mean and the largest number of requests a forward served, and how many forwards started in it. A bin
    with no forward has ``None`` (a gap in the chart, not a batch of zero). Bins hold at least a few forwards
    each (``MIN_FORWARDS_PER_BIN``) and there are at most ``MAX_BINS``, so the series is small whatever the
    run's length."""

    origin_ns: int  # wall-clock ns of t = 0: the first joined forward's start (the clock of the run's tables)
    bin_s: float
    t_s: list[float]  # each bin's middle, seconds after the origin
    mean: list[float | None]
    max: list[int | None]
    forwards: list[int]
    levels: list[LevelMark] = field(default_factory=list)  # filled when load levels exist (split_by_levels)


MAX_BINS = 240
MIN_FORWARDS_PER_BIN = 3


def batch_series(start_ns: np.ndarray, members: np.ndarray) -> BatchSeries | None:
    """``start_ns`` and ``members`` per forward (``members``: requests it served; 0: joined none)."""
    keep = members > 0
    start, size = start_ns[keep], members[keep]
    if not len(start):
        return None
    origin = int(start.min())
    span = int(start.max()) - origin
    n_bins = int(min(MAX_BINS, max(1, len(start) // MIN_FORWARDS_PER_BIN)))
    width = max(span / n_bins, 1.0) if span > 0 else 1.0
    which = np.minimum(((start - origin) / width).astype(np.int64), n_bins - 1)
    count = np.bincount(which, minlength=n_bins)
    total = np.bincount(which, weights=size.astype(np.float64), minlength=n_bins)
    most = np.zeros(n_bins, dtype=np.int64)
    np.maximum.at(most, which, size)
    return BatchSeries(origin_ns=origin, bin_s=width / 1e9, t_s=[(i + 0.5) * width / 1e9 for i in range(n_bins)],
                       mean=[float(t / c) if c else None for t, c in zip(total.tolist(), count.tolist())],
                       max=[int(m) if c else None for m, c in zip(most.tolist(), count.tolist())],
                       forwards=[int(c) for c in count.tolist()])


@dataclass
class BatchStats:
    """Requests whose forwards ran in a batch outside the request (serving/analysis/batching.py)."""

    requests: int  # joined to the forwards that served them
    unattributed: int  # ran no forward of their own while the model ran outside requests, joined to none
    forwards: int  # forwards outside any request
    forwards_joined: int  # of those, forwards that served at least one joined request
    size_p50: float | None  # requests per joined forward
    size_p90: float | None
    size_max: int | None
    sizes: dict[str, int]  # requests per forward → forwards
    rows_p50: float | None  # the forward input's batch dimension
    wait_share: float  # the joined requests' wait for their batch, share of their service time
    queued_share: float | None  # part of it before the batcher took the work (earlier batches still running)
    collect_share: float | None  # part of it after: the batcher collecting more work (its wait window)
    wait_p50_ms: float
    wait_p95_ms: float
    collect_p50_ms: float | None  # how long the batcher held a request's work before its forward
    forward_p50_ms: float | None  # a joined forward's wall time
    own_p50_ms: float  # a request's share of its forwards (each divided among the requests it served)
    multi_forward: int  # requests served by several forwards (a generation loop: prefill, then decode)
    prefill_p50_ms: float | None  # their first forward
    decode_p50_ms: float | None  # the rest, summed per request
    over_time: BatchSeries | None = None  # requests per forward over the run (the HTML report's chart)



def unattributed_note(join: BatchJoin | None, no_forward: int) -> str | None:
    if join is None or not join.unattributed:
        return None
    return (f"{join.unattributed:,} of {no_forward:,} requests without a model forward of their own overlapped "
            f"the {join.outside:,} forwards that ran outside any request (a batcher's), but no queue hand-off "
            "ties them to those forwards (the work went through something other than queue.Queue or "
            "asyncio.Queue): their wait for a batch and their share of it are not attributed")


def batch_rows(join: BatchJoin | None, run: Run) -> dict[str, np.ndarray]:
    if join is None:
        return {}
    b = run.batches
    return {"start_ns": np.asarray(b["start_ns"], dtype=np.int64), "end_ns": np.asarray(b["end_ns"], dtype=np.int64),
            "rows": np.asarray(b["rows"], dtype=np.int64), "members": join.members}


def batch_size_stats(members: np.ndarray) -> tuple[float | None, float | None, int | None, dict[str, int]]:
    m = members[members > 0]
    if not len(m):
        return None, None, None, {}
    vals, counts = np.unique(m, return_counts=True)
    return (float(np.percentile(m, 50)), float(np.percentile(m, 90)), int(m.max()),
            {str(int(v)): int(c) for v, c in zip(vals, counts)})


def batch_stats(join: BatchJoin, run: Run) -> BatchStats:
    p = join.parts
    service = float((p["pre_ns"] + p["wait_ns"] + p["infer_ns"] + p["post_ns"]).sum())
    took = p["queued_ns"] >= 0
    b = run.batches
    dur = (np.asarray(b["end_ns"], dtype=np.int64) - np.asarray(b["start_ns"], dtype=np.int64))[join.members > 0]
    rows = np.asarray(b["rows"], dtype=np.int64)[join.members > 0]
    rows = rows[rows >= 0]
    multi = p["forwards"] > 1
    p50, p90, mx, sizes = batch_size_stats(join.members)

    def share(v: np.ndarray) -> float:
        return float(v.sum()) / service if service > 0 else 0.0

    def ms(v: np.ndarray, q: float) -> float | None:
        return float(np.percentile(v, q)) / 1e6 if len(v) else None

    return BatchStats(
        requests=len(join.index), unattributed=join.unattributed, forwards=join.outside,
        forwards_joined=int((join.members > 0).sum()), size_p50=p50, size_p90=p90, size_max=mx, sizes=sizes,
        rows_p50=float(np.median(rows)) if len(rows) else None, wait_share=share(p["wait_ns"]),
        queued_share=share(p["queued_ns"][took]) if took.any() else None,
        collect_share=share(p["collect_ns"][took]) if took.any() else None,
        wait_p50_ms=ms(p["wait_ns"], 50) or 0.0, wait_p95_ms=ms(p["wait_ns"], 95) or 0.0,
        collect_p50_ms=ms(p["collect_ns"][took], 50),
        forward_p50_ms=ms(dur, 50), own_p50_ms=ms(p["own_ns"], 50) or 0.0, multi_forward=int(multi.sum()),
        prefill_p50_ms=ms(p["prefill_ns"][multi], 50), decode_p50_ms=ms(p["decode_ns"][multi], 50),
        over_time=batch_series(np.asarray(b["start_ns"], dtype=np.int64), join.members))
