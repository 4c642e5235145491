"""Requests whose model forward ran in a batch on another thread or task: ``join_batches(requests, batches)``.

A dynamic-batching server (Triton's dynamic batcher, TorchServe's ``batch_size``, vLLM's engine loop, an
``asyncio.Queue`` in front of a model thread) runs no forward inside the request: the handler puts its work
on a queue and waits; a batcher outside any request takes it off, runs one forward for many requests and
answers each. The hook records the three moments of that hand-off on the request's ``R`` line (its first
put on a queue, when a consumer outside any request took the work, when a future handed over with it was
resolved) and each forward outside any request as a ``batches`` row (docs/serving.md, "Batching servers").

By identity first: a forward that names the request (its hand-off key) served it — if it started before the
request's answer. A batcher that takes a request whose client has gone (Ray Serve cancels it: a 500) names it, then
drops it from the batch or runs it after the request has ended; naming it is not serving it.

The join: a request's forwards are the forwards of its process that **started after its work was taken**
(the put, when the take was not seen) and **ended before it had its answer** (its future resolved; for a
stream, its handler's last get of a token from a queue, and no more steps than it got items; else its
response's end). That holds for a batch of one forward (Triton's pattern)
and for a generation loop whose every step includes the request (continuous batching: the first forward
is its prefill, the rest its decode). Counted per forward, the requests it served are its batch size.

Parts of a joined request's service time: ``pre`` (start → the put), ``wait`` (the put → its first forward:
queued behind earlier batches, then collected while the batcher's window filled), ``infer`` (its forwards'
wall time, all of it: the request waits for the whole batch), ``post`` (the rest). Its *share* of the
forwards (each forward's time divided among the requests it served) is what the request cost the model.

For an engine (a generation loop), what a request waited behind before its own first forward: the other
sequences' decode-only forwards that started after its request was queued while a slot was free
(``behind_ns``, ``behind_steps``: a decode-first scheduler holding new prompts back, read by
``serving/analysis/slo_miss.py``), and ``model_ns``, its first forward's start → its last one's end (the engine
running it, read by ``serving/analysis/capacity.py``).

Requests that ran no forward of their own while forwards ran outside any request, but could not be joined
(no hand-off seen: the work went through something other than ``queue.Queue``/``asyncio.Queue``), are
counted: the report says how many were left unattributed. A forward whose rows (its first tensor's first
dimension: at least one per request it served) are all taken by the requests joined to it had no room for
another, so a request that overlapped only such forwards is not counted: a health check or a metrics scrape
answered while a batch ran is no lost request. A forward of unknown rows always has room.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpusleuth.serving.analysis.follow import NO_KEY, forward_keys, request_follow_keys
from gpusleuth.run.model import Table

HANDOFF_COLUMNS = ("handoff_ns", "claimed_ns", "delivered_ns", "received_ns", "gets")


@dataclass
class BatchJoin:
    """The joined requests (``index``: rows of the requests table) with their parts, and per forward."""

    index: np.ndarray
    parts: dict[str, np.ndarray]  # pre_ns, wait_ns, queued_ns, collect_ns, infer_ns, post_ns, own_ns,
    #                               prefill_ns, decode_ns, forwards, batch (requests in its first forward),
    #                               behind_ns, behind_steps (others' decode-only forwards before its first),
    #                               model_ns (its first forward's start → its last one's end)
    members: np.ndarray  # per row of ``batches``: requests joined to that forward
    unattributed: int  # requests without a forward of their own that overlapped forwards but joined none
    outside: int  # forwards outside any request


def _col(t: Table, name: str, n: int) -> np.ndarray:
    return np.asarray(t[name], dtype=np.int64) if name in t else np.full(n, -1, dtype=np.int64)


def join_batches(requests: Table, batches: Table) -> BatchJoin | None:
    """None when no forward ran outside a request (every server that runs its model in the request)."""
    if not len(batches) or not len(requests) or "forwards" not in requests:
        return None
    n = len(requests)
    pid = np.asarray(requests["pid"], dtype=np.int64)
    start, end = np.asarray(requests["start_ns"], dtype=np.int64), np.asarray(requests["end_ns"], dtype=np.int64)
    handoff, claimed, delivered, received, gets = (_col(requests, c, n).copy() for c in HANDOFF_COLUMNS)
    own_forward = np.asarray(requests["forwards"], dtype=np.int64) > 0
    b_pid = np.asarray(batches["pid"], dtype=np.int64)
    b_s, b_e = np.asarray(batches["start_ns"], dtype=np.int64), np.asarray(batches["end_ns"], dtype=np.int64)
    # by identity first (serving/analysis/follow.py): a forward that names the requests it ran for serves those, in
    # whatever process it ran; the time windows below are for the forwards that name none
    by_key, taken, keyed = forward_keys(batches)
    fkeys = request_follow_keys(requests)
    by_pid: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # the forwards that name no request, to join by time
    every: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # all of a process's forwards: what a request waited behind
    for p in np.unique(b_pid).tolist():
        for table, mask in ((by_pid, (b_pid == p) & ~keyed), (every, b_pid == p)):
            idx = np.flatnonzero(mask)
            idx = idx[np.argsort(b_s[idx], kind="stable")]
            table[p] = (idx, b_s[idx])

    def inside(p: int, lo: int, hi: int) -> np.ndarray:
        if p not in by_pid:
            return np.empty(0, dtype=np.int64)
        idx, starts = by_pid[p]
        cand = idx[np.searchsorted(starts, lo, "left"):np.searchsorted(starts, hi, "right")]
        out: np.ndarray = cand[b_e[cand] <= hi]
        return out

    joined: list[tuple[int, np.ndarray]] = []
    unjoined: list[int] = []
    for i in np.flatnonzero(~own_forward).tolist():
        p = int(pid[i])
        key = fkeys[i]
        named = np.asarray(by_key.get(key, ()) if key and key != NO_KEY else (), dtype=np.int64)
        if end[i] > 0:
            named = named[b_s[named] < end[i]]  # a forward that started after the request's answer did not serve it
        if len(named):
            if handoff[i] < 0:
                handoff[i] = start[i]  # a replica's own request: its work was handed over as it started
            t = taken.get(key, -1)
            if t >= handoff[i]:
                claimed[i] = t  # the consumer's take, in its own process
            joined.append((i, named))
            continue
        if handoff[i] >= 0:
            lo = int(claimed[i]) if claimed[i] >= handoff[i] else int(handoff[i])
            # answered: its future resolved; else (a stream) its last get of a token; else its response's end
            hi = int(delivered[i]) if delivered[i] >= lo else int(received[i]) if received[i] >= lo else int(end[i])
            cand = inside(p, lo, hi)
            if delivered[i] < lo <= received[i] and gets[i] > 0:
                # a stream: one item per step it was in (and maybe an end marker), so at most that many of the
                # steps after the take; its handler can take the last one late, while the engine steps on
                cand = cand[:int(gets[i])]
            if len(cand):
                joined.append((i, cand))
                continue
        unjoined.append(i)
    members = np.zeros(len(batches), dtype=np.int64)
    firsts = np.zeros(len(batches), dtype=np.int64)  # per forward: joined requests it was the first of
    for _, cand in joined:
        members[cand] += 1
        firsts[cand[0]] += 1
    # the model ran meanwhile, but the request is not joinable to it: unattributed, unless every forward it
    # overlapped had all its rows taken by the requests joined to it (a 404 for gpusleuth load's own /metrics
    # scrape that happened to span a batch of two served two others: no room in it for this one)
    rows = _col(batches, "rows", len(batches))
    room = (rows <= 0) | (members < rows)
    unattributed = sum(1 for i in unjoined if room[inside(int(pid[i]), int(start[i]), int(end[i]))].any())
    dur = (b_e - b_s).astype(np.float64)
    full = _most_together(members)
    names = ("pre_ns", "wait_ns", "queued_ns", "collect_ns", "infer_ns", "post_ns", "own_ns", "prefill_ns",
             "decode_ns", "forwards", "batch", "behind_ns", "behind_steps", "model_ns")
    out = {k: np.zeros(len(joined), dtype=np.int64) for k in names}
    for j, (i, cand) in enumerate(joined):
        first = int(b_s[cand[0]])
        service = int(end[i] - start[i])
        pre = min(max(int(handoff[i] - start[i]), 0), service)
        wait = min(max(first - int(handoff[i]), 0), service - pre)
        infer = min(int(dur[cand].sum()), service - pre - wait)
        took = int(claimed[i]) if handoff[i] <= claimed[i] <= first else -1
        out["pre_ns"][j], out["wait_ns"][j], out["infer_ns"][j] = pre, wait, infer
        out["post_ns"][j] = max(service - pre - wait - infer, 0)
        out["queued_ns"][j] = took - int(handoff[i]) if took >= 0 else -1
        out["collect_ns"][j] = first - took if took >= 0 else -1
        out["own_ns"][j] = int((dur[cand] / np.maximum(members[cand], 1)).sum())
        out["prefill_ns"][j] = int(dur[cand[0]])
        out["decode_ns"][j] = int(dur[cand[1:]].sum())
        out["forwards"][j] = len(cand)
        out["batch"][j] = int(members[cand[0]])
        out["model_ns"][j] = int(b_e[cand[-1]]) - first  # its first forward's start → its last one's end
        out["behind_ns"][j], out["behind_steps"][j] = _behind(every.get(int(pid[i])), b_s, dur, members, firsts,
                                                              full, int(handoff[i]), first)
    index = np.asarray([i for i, _ in joined], dtype=np.int64)
    return BatchJoin(index=index, parts=out, members=members, unattributed=unattributed, outside=len(batches))


def _most_together(members: np.ndarray) -> int:
    """The most requests the forwards served together, counting only sizes at least 1 % of the joined forwards
    had: one forward a stream's late reads attributed one request too many does not make a new maximum."""
    m = members[members > 0]
    if not len(m):
        return 0
    vals, counts = np.unique(m, return_counts=True)
    return int(vals[counts >= max(1.0, 0.01 * len(m))].max())


def _behind(forwards: tuple[np.ndarray, np.ndarray] | None, b_s: np.ndarray, dur: np.ndarray, members: np.ndarray,
            firsts: np.ndarray, full: int, handoff: int, first: int) -> tuple[int, int]:
    """(ns, steps) of the forwards a request waited behind that were the other requests' decode only, with a
    slot free: they started after it was queued and before its own first forward, served joined requests,
    were the first forward of none of them (no prefill in them), and ran fewer requests than ``full``, the
    most the engine ran together. What a decode-first engine runs while a prompt waits; a step that full is
    a wait for a slot — the engine's capacity, not its schedule — and is not counted."""
    if forwards is None or handoff < 0 or first <= handoff:
        return 0, 0
    idx, starts = forwards
    cand = idx[np.searchsorted(starts, handoff, "left"):np.searchsorted(starts, first, "left")]
    decode = cand[(members[cand] > 0) & (firsts[cand] == 0) & (members[cand] < full)]
    return int(dur[decode].sum()), len(decode)


__all__ = ["BatchJoin", "HANDOFF_COLUMNS", "join_batches"]
