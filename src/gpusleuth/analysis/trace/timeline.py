"""Device timeline and the exposed-time partition: what the device did (or waited on) at every instant.

One priority painting over the whole trace window labels each instant with exactly one category:
device work first (compute > communication > copies by direction > memset — so communication that runs
under compute is "overlapped", not exposed), and where the device is idle, the cause read from the host
side at that instant (see ``IDLE_CATS`` and docs/trace-analysis.md). Per-step, per-device-span and
whole-trace sums are then tallies of the same painted segments, so each partition sums exactly to its
window, in integer nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpusleuth.sources.kineto.model import CPU_OP, PYTHON, RUNTIME, TRACE, USER_ANN

from . import classify as C
from gpusleuth.analysis.intervals import overlap_each, union

from .intervals import covers, paint_active, tally
from .prep import ALL_CATS, COMM, COMPUTE, DEVICE_CATS, IDLE_CATS, Prepared

#: An op that is ready to run (launched, and the previous op on its stream finished) but has not started
#: within this long is waiting on a dependency (an event from another stream, a peer rank), not on
#: launch or scheduling latency. Same 30 µs cut HTA uses for "kernel_wait" (measured launch latency on an
#: empty queue is 2–10 µs on the real traces; the launch stats report it).
DEPENDENCY_NS = 30_000


@dataclass
class Timeline:
    lo: int
    hi: int
    bounds: np.ndarray
    label: np.ndarray
    compute_active: np.ndarray
    comm_active: np.ndarray
    span_lo: int | None
    span_hi: int | None
    busy: tuple[np.ndarray, np.ndarray]
    compute: tuple[np.ndarray, np.ndarray]
    comm: tuple[np.ndarray, np.ndarray]


#: Two synchronizing calls this close together are one statement's: the host time between them belongs to the
#: sync as well. ``print(tensor)`` on a CUDA tensor is a dozen syncs (``item``, ``is_nonzero``, ``masked_select``)
#: with formatting between, 0.9 ms a step on an H200 where the syncs alone were 0.35 ms — removing the statement
#: removes all of it (its fixed twin measured ×1.84 where the syncs alone predicted ×1.07). Training work between
#: two syncs (a forward, a backward) takes longer than this, and device-busy instants stay the device's anyway.
SYNC_BRIDGE_NS = 300_000


def bridged(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sync intervals plus the host gaps of at most ``SYNC_BRIDGE_NS`` between consecutive ones."""
    if len(s) < 2:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    gap_s, gap_e = reach[:-1], s[1:]
    ok = (gap_e > gap_s) & (gap_e - gap_s <= SYNC_BRIDGE_NS)
    return np.concatenate([s, gap_s[ok]]), np.concatenate([e, gap_e[ok]])


def _evidence_layers(p: Prepared, busy: tuple[np.ndarray, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Host-side evidence intervals, one layer per idle cause, in ``IDLE_CATS`` order."""
    tr = p.trace
    ev = tr.events
    k = ev["kind"]
    ts = ev["ts"]
    end = ts + np.maximum(ev["dur"], 0)
    names = tr.names
    # what each row's name is, as bits (one gather of the name codes instead of one per question)
    step_b, sync_b, dl_b, opt_b, launch_b = 1, 2, 4, 8, 16
    table = np.zeros(len(names) + 1, np.uint8)
    for bit, predicate in ((step_b, C.is_profiler_step), (sync_b, C.is_sync), (dl_b, C.is_data_loader),
                           (opt_b, C.is_optimizer), (launch_b, C.is_launch)):
        table[C.lookup(names, predicate)] |= bit
    named = table[ev["name"]]
    host = (k == CPU_OP) | (k == RUNTIME) | (k == USER_ANN) | (k == PYTHON)
    host &= (named & step_b) == 0
    sync_m = host & ((named & sync_b) != 0)
    dl_m = host & (k != RUNTIME) & ((named & dl_b) != 0)
    opt_m = host & (k != RUNTIME) & ((named & opt_b) != 0)
    launch_m = (k == RUNTIME) & ((named & launch_b) != 0)
    bs, be = busy

    def drained(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A blocking wait that began while the device was busy drains the queue; the idle time until
        the device restarts is caused by that wait, so extend the interval to the next device start."""
        s, e = ts[m], end[m]
        if len(bs) == 0 or len(s) == 0:
            return s, e
        busy_then = covers(bs, be, s)
        nxt = np.searchsorted(bs, e, side="left")
        restart = np.where(nxt < len(bs), bs[np.minimum(nxt, len(bs) - 1)], e)
        return s, np.where(busy_then, np.maximum(e, restart), e)

    # ready-but-not-started device work: the first DEPENDENCY_NS is launch latency (queue was empty at
    # launch) or inter-kernel scheduling gap (queued behind the previous op); beyond it, a dependency
    has = p.launch >= 0
    ready, start = p.ready[has], p.start[has]
    behind = ready > p.l_end[has]  # became ready when the previous op on its stream finished
    short_end = np.minimum(start, ready + DEPENDENCY_NS)
    dep = (ready + DEPENDENCY_NS, start)
    gap = (ready[behind], short_end[behind])
    lat = (ready[~behind], short_end[~behind])
    ls, le = ts[launch_m], end[launch_m]
    layers = {
        "idle_dependency": dep,
        "idle_kernel_gap": gap,
        "idle_sync": bridged(*drained(sync_m)),
        "idle_data_loader": drained(dl_m),
        "idle_optimizer_cpu": (ts[opt_m], end[opt_m]),
        "idle_launch": (np.concatenate([ls, lat[0]]), np.concatenate([le, lat[1]])),
        "idle_host": (ts[host], end[host]),
        "idle_other": (np.empty(0, np.int64), np.empty(0, np.int64)),
    }
    return [layers[c] for c in IDLE_CATS]


def build(p: Prepared) -> Timeline:
    """Paint the whole trace window once."""
    ev = p.trace.events
    k = ev["kind"]
    real = k != TRACE
    ts = ev["ts"][real]
    if len(ts):
        lo = int(ts.min())
        hi = int((ts + np.maximum(ev["dur"][real], 0)).max())
    else:
        lo = hi = 0
    busy = union(p.start, p.end, presorted=True)
    dev_layers = [union(p.start[p.cat == c], p.end[p.cat == c], presorted=True) for c in range(len(DEVICE_CATS))]
    layers = dev_layers + _evidence_layers(p, busy)
    span_lo = int(p.start.min()) if p.n else None
    span_hi = int(p.end.max()) if p.n else None
    hi = max(hi, span_hi or hi)
    extra = [p.step_start, p.step_end]
    if span_lo is not None:
        extra.append(np.array([span_lo, span_hi], np.int64))
    bounds, label, (compute_active, comm_active) = paint_active(layers, lo, hi, np.concatenate(extra),
                                                                active=(COMPUTE, COMM))
    label[label == len(layers)] = ALL_CATS.index("idle_other")  # no device work, no host evidence
    return Timeline(lo, hi, bounds, label, compute_active, comm_active, span_lo, span_hi, busy,
                    dev_layers[COMPUTE], dev_layers[COMM])


def partition(tl: Timeline, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """ns per (window, category in ``ALL_CATS``); each row sums to its window's length."""
    return tally(tl.bounds, tl.label, len(ALL_CATS), np.asarray(starts, np.int64), np.asarray(ends, np.int64))


def overlapped_comm(tl: Timeline, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """ns of communication hidden under compute, per window."""
    both = (tl.compute_active & tl.comm_active).astype(np.int16)
    return tally(tl.bounds, both, 2, np.asarray(starts, np.int64), np.asarray(ends, np.int64))[:, 1]


@dataclass(frozen=True)
class DeviceTime:
    """Seconds of the device span by what the device did (``TraceAnalysis.device_time`` in the JSON)."""

    busy_s: float
    compute_s: float
    non_compute_s: float
    idle_s: float
    # copies between the first compute kernel's start and the last one's end (see _copy_between_kernels)
    copy_between_kernels_s: float


@dataclass(frozen=True)
class DeviceSplit:
    """HTA's temporal breakdown of the device span, and the span's exposed-time partition."""

    device_span_s: float
    compute: float  # shares of the span
    non_compute: float
    idle: float
    time: DeviceTime
    span_partition: dict[str, float]  # seconds per category in ALL_CATS; categories with none left out


NO_DEVICE = DeviceSplit(device_span_s=0.0, compute=0.0, non_compute=0.0, idle=0.0,
                        time=DeviceTime(0.0, 0.0, 0.0, 0.0, 0.0), span_partition={})


def device_split(tl: Timeline) -> DeviceSplit:
    """HTA's temporal breakdown, same definition: over the span from the first device op's start to the
    last one's end, idle = span − busy union, compute = union of compute kernels, non-compute = the rest
    (copies, sets, communication not under compute)."""
    if tl.span_lo is None or tl.span_hi is None:
        return NO_DEVICE
    part = partition(tl, np.array([tl.span_lo]), np.array([tl.span_hi]))[0]
    span = tl.span_hi - tl.span_lo
    nd = len(DEVICE_CATS)
    compute = int(part[COMPUTE])
    non_compute = int(part[1:nd].sum())
    idle = int(part[nd:].sum())

    def frac(x: int) -> float:
        return x / span if span > 0 else 0.0

    return DeviceSplit(
        device_span_s=span / 1e9,
        compute=frac(compute), non_compute=frac(non_compute), idle=frac(idle),
        time=DeviceTime(busy_s=(compute + non_compute) / 1e9, compute_s=compute / 1e9,
                        non_compute_s=non_compute / 1e9, idle_s=idle / 1e9,
                        copy_between_kernels_s=_copy_between_kernels(tl)),
        span_partition={c: int(v) / 1e9 for c, v in zip(ALL_CATS, part) if v},
    )


def _copy_between_kernels(tl: Timeline) -> float:
    """Seconds of copies between the first compute kernel's start and the last one's end: copies that
    recur among the kernels (per iteration, on demand) rather than bracket them (inputs in once, results
    out once) — the copy-bound rule's severity rests on which."""
    starts, ends = tl.compute
    if not len(starts):
        return 0.0
    part = partition(tl, np.array([int(starts.min())]), np.array([int(ends.max())]))[0]
    return sum(int(v) for c, v in zip(ALL_CATS, part) if c.startswith("memcpy")) / 1e9


@dataclass(frozen=True)
class CommOverlap:
    """Communication time and how much of it ran under compute: the ``overlap`` entry of a rank's JSON."""

    comm_s: float
    overlapped_s: float
    exposed_s: float  # what actually costs step time
    overlap_ratio: float | None  # HTA's definition; None without communication


def comm_overlap(tl: Timeline) -> CommOverlap:
    """Share of communication time that ran while compute kernels also ran (HTA's definition), plus the
    exposed remainder, which is what actually costs step time."""
    comm_s, comm_e = tl.comm
    total = int((comm_e - comm_s).sum())
    if total == 0:
        return CommOverlap(comm_s=0.0, overlapped_s=0.0, exposed_s=0.0, overlap_ratio=None)
    both = int(overlap_each(*tl.comm, *tl.compute).sum())
    return CommOverlap(comm_s=total / 1e9, overlapped_s=both / 1e9, exposed_s=(total - both) / 1e9,
                       overlap_ratio=both / total)
