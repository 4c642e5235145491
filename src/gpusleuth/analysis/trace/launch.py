"""Launch statistics: launch cost, launch latency vs queueing delay, queue saturation.

HTA's "launch delay" (device start − end of the launch call) mixes two different things: the latency of
launching into an empty queue (a CPU/driver cost) and time spent queued behind earlier work (the GPU is
busy — which is good). We split them by the per-stream queue depth at the moment of the launch: the
number of ops on that stream already launched but not yet started.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .prep import Prepared

#: The CUDA launch queue blocks the host near 1024 pending entries per stream; CUPTI traces show the
#: plateau at 1022–1023, so "saturated" starts a little below the nominal limit.
SATURATION_DEPTH = 1000


@dataclass(frozen=True)
class LaunchCost:
    """The launch call's own duration, µs (None: no launches)."""

    median: float | None
    p95: float | None
    total_s: float


@dataclass(frozen=True)
class Delays:
    """Delays from a launch call's return to its op's start, µs, over ``count`` launches (None: none)."""

    count: int
    median: float | None
    p95: float | None


@dataclass(frozen=True)
class HtaDelay:
    median: float | None  # HTA's "launch delay" (latency and queueing mixed), µs


@dataclass(frozen=True)
class QueueDepth:
    """Ops already launched on the stream but not yet started, at each launch (None: no launches)."""

    median: float | None
    p95: float | None
    max: int


@dataclass(frozen=True)
class ShorterThanLaunch:
    count: int
    share: float  # of the launched ops (0.0 without any)


@dataclass(frozen=True)
class StreamQueue:
    launches: int
    max_queue_depth: int
    saturated_s: float


@dataclass(frozen=True)
class LaunchStats:
    """Launch cost, latency vs queueing and queue saturation: the ``launch`` entry of a rank's JSON."""

    launches: int  # launch calls (a cudaGraphLaunch counts once)
    device_ops_launched: int
    launch_cost_us: LaunchCost
    launch_latency_us: Delays  # launches into an empty queue: a CPU/driver cost
    queueing_delay_us: Delays  # launches behind earlier work: the GPU was busy
    hta_launch_delay_us: HtaDelay
    queue_depth_at_launch: QueueDepth
    max_queue_depth: int
    saturation_depth: int
    saturated_s: float
    saturated_share: float  # of the device span
    ops_shorter_than_launch: ShorterThanLaunch
    streams: dict[int, StreamQueue]


NO_LAUNCHES = LaunchStats(
    launches=0, device_ops_launched=0, launch_cost_us=LaunchCost(None, None, 0.0),
    launch_latency_us=Delays(0, None, None), queueing_delay_us=Delays(0, None, None),
    hta_launch_delay_us=HtaDelay(None), queue_depth_at_launch=QueueDepth(None, None, 0), max_queue_depth=0,
    saturation_depth=SATURATION_DEPTH, saturated_s=0.0, saturated_share=0.0,
    ops_shorter_than_launch=ShorterThanLaunch(0, 0.0), streams={})


def _pct(a: np.ndarray, q: float) -> float | None:
    return float(np.percentile(a, q)) / 1e3 if len(a) else None


def _median_p95(a: np.ndarray) -> tuple[float | None, float | None]:
    """``(_pct(a, 50), _pct(a, 95))`` from one partition of ``a`` (the same values: each percentile is
    interpolated between the same two order statistics)."""
    if not len(a):
        return None, None
    med, p95 = np.percentile(a, [50, 95])
    return float(med) / 1e3, float(p95) / 1e3


def launch_stats(p: Prepared) -> LaunchStats:
    has = p.launch >= 0
    n_ops = int(has.sum())
    if n_ops == 0:
        return NO_LAUNCHES
    op_cost = (p.l_end - p.l_start)[has]
    op_dur = p.dur[has]
    # one queue entry per launch *call*: a cudaGraphLaunch enqueues a whole graph with one call, so
    # only the first op of each launch counts for queue depth, latency and queueing
    rows = p.launch[has]
    _, first = np.unique(rows, return_index=True)
    sel = np.flatnonzero(has)[np.sort(first)]
    n = len(sel)
    ls, le = p.l_start[sel], p.l_end[sel]
    st = p.start[sel]
    stream = p.stream[sel]
    cost = le - ls
    delay = st - le
    depth = np.zeros(n, np.int64)
    sat_ns = 0
    max_depth = 0
    span = max(int(p.end.max() - p.start.min()), 1)
    per_stream: dict[int, StreamQueue] = {}
    for s in np.unique(stream):
        m = np.flatnonzero(stream == s)
        lt = ls[m]
        order = np.argsort(lt, kind="stable")
        rank = np.empty(len(m), np.int64)
        rank[order] = np.arange(len(m))
        starts_sorted = np.sort(st[m])
        started = np.searchsorted(starts_sorted, lt, side="left")
        d = np.maximum(rank - started, 0)
        depth[m] = d
        # time-weighted queue length: +1 at each launch, -1 at each device start
        t = np.concatenate([lt, st[m]])
        w = np.concatenate([np.ones(len(m), np.int64), -np.ones(len(m), np.int64)])
        o = np.argsort(t, kind="stable")
        t, level = t[o], np.cumsum(w[o])
        seg = np.diff(t)
        full = int(seg[level[:-1] >= SATURATION_DEPTH].sum())
        sat_ns += full
        mx = int(level.max()) if len(level) else 0
        max_depth = max(max_depth, mx)
        per_stream[int(s)] = StreamQueue(launches=int(len(m)), max_queue_depth=mx, saturated_s=full / 1e9)
    empty = depth == 0
    lat = np.maximum(delay[empty], 0)
    queued = np.maximum(delay[~empty], 0)
    cost_med, cost_p95 = _median_p95(cost)
    lat_med, lat_p95 = _median_p95(lat)
    queued_med, queued_p95 = _median_p95(queued)
    return LaunchStats(
        launches=n,
        device_ops_launched=n_ops,
        launch_cost_us=LaunchCost(median=cost_med, p95=cost_p95, total_s=float(cost.sum()) / 1e9),
        launch_latency_us=Delays(count=int(empty.sum()), median=lat_med, p95=lat_p95),
        queueing_delay_us=Delays(count=int((~empty).sum()), median=queued_med, p95=queued_p95),
        hta_launch_delay_us=HtaDelay(median=_pct(np.maximum(delay, 0), 50)),
        queue_depth_at_launch=QueueDepth(median=float(np.median(depth)), p95=float(np.percentile(depth, 95)),
                                         max=int(depth.max())),
        max_queue_depth=max_depth,
        saturation_depth=SATURATION_DEPTH,
        saturated_s=sat_ns / 1e9,
        saturated_share=sat_ns / span,
        ops_shorter_than_launch=ShorterThanLaunch(count=int((op_dur < op_cost).sum()),
                                                  share=float((op_dur < op_cost).mean())),
        streams=per_stream,
    )
