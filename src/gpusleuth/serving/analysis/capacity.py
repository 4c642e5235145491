"""Is one replica of the server simply full? ``assess_capacity(load, requests) -> Capacity | None``.

Under ``gpusleuth load -- CMD`` with the server recorded, per level: how much of the level's time the model
was working for someone (``model_busy``: the union over the level's span of the forwards outside the
requests, ``batches``, of each batched request's first forward → its last — an engine running a sequence
— and of each in-request forward, start + pre → + infer), how long requests waited before any work was done for them (``waiting_p50_ms``: the
server's queue + the wait for a batch or an engine slot, p50, plus the time outside the server's handling,
p50), and what was served (answers/s, and with an SLO the requests meeting it).

**Saturated** (``_saturation``): at the heaviest level throughput is no more than 1.15× the best of the
levels with half its load or less (open loop: below 90 % of the rate asked), the requests' waiting grew (≥ 5 ms and ≥ 25 % of the client's latency
p50), the model worked for someone ≥ 80 % of the level's span, and no batch window (≥ 10 % of service time
held collecting) or preprocessing (≥ 30 % before the model) explains the wait instead.

**The arithmetic** (what the report's "too few replicas" finding quotes): the capacity of one replica is
the heaviest level that still met the latency target — the SLO (``--slo``: attainment at or above its
target), else the p95 budget (the knee), else the knee of throughput alone — and the offered load is the
heaviest level's. In closed loop a level's load is its concurrency: replicas = ⌈heaviest concurrency ÷
the concurrency one replica served within the target⌉ (its requests/s and tokens/s at that level said
beside it). In open loop it is the rate: replicas = ⌈offered rate ÷ the requests/s one replica served
within the target (goodput with an SLO)⌉. A level between the one that met the target and the next, which
did not, would narrow it: the count is an upper bound by that step. Pure: reads the load and request analyses only.
"""

from __future__ import annotations

import math

import numpy as np

from gpusleuth.analysis import intervals as iv
from gpusleuth.serving.analysis.load import LoadAnalysis
from gpusleuth.serving.analysis.request_model import Capacity, CapacityLevel, RequestAnalysis


def _busy(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> float | None:
    if not len(starts) or hi <= lo:
        return None
    s, e = np.maximum(starts, lo), np.minimum(ends, hi)
    keep = e > s
    if not keep.any():
        return 0.0
    us, ue = iv.union(s[keep], e[keep])
    return float((ue - us).sum()) / (hi - lo)


def _model_spans(requests: RequestAnalysis) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) ns of the time the model was working for someone: every forward outside the requests (a
    batcher's, an engine's), each batched request's first forward → its last one (an engine steps on for a
    running sequence without a pause worth the name: the Python between its steps is the engine's work too),
    and each in-request forward (start + pre → + infer)."""
    rows, b = requests._rows, requests._batches
    starts, ends = [], []
    if b:
        starts.append(np.asarray(b["start_ns"], dtype=np.int64))
        ends.append(np.asarray(b["end_ns"], dtype=np.int64))
    if rows:
        batched = rows["batched"]
        begin = rows["start_ns"] + np.maximum(rows["pre_ns"], 0) + np.where(batched, np.maximum(rows["wait_ns"], 0), 0)
        span = np.maximum(np.where(batched, rows["model_ns"], rows["infer_ns"]), 0)
        has = span > 0
        starts.append(begin[has])
        ends.append(begin[has] + span[has])
    if not starts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(starts), np.concatenate(ends)


def _waiting(requests: RequestAnalysis, lo: int, hi: int, outside_ms: float | None) -> float | None:
    rows = requests._rows
    if not rows:
        return None
    m = (rows["start_ns"] >= lo) & (rows["start_ns"] < hi)
    if not m.any():
        return None
    wait = np.maximum(rows["queue_ns"][m], 0) + np.maximum(rows["wait_ns"][m], 0)
    return float(np.median(wait)) / 1e6 + (outside_ms or 0.0)


def assess_capacity(load: LoadAnalysis | None, requests: RequestAnalysis | None) -> Capacity | None:
    """None without at least two load levels that got answers, or without the server's requests."""
    if load is None or requests is None or not requests.levels:
        return None
    by_level = {lv.level: lv for lv in requests.levels}
    spans = _model_spans(requests)
    out: list[CapacityLevel] = []
    budget = getattr(load, "p95_budget_ms", None)
    for lv in load.levels:
        if not lv.ok:
            continue
        rl = by_level.get(lv.level)
        slo, tokens = lv.slo, lv.tokens
        meets = slo.meets if slo is not None else (lv.p95_ms <= budget if budget is not None and lv.p95_ms is not None
                                                   else None)
        out.append(CapacityLevel(
            level=lv.level, concurrency=lv.concurrency, rate=lv.rate, rps=lv.rps,
            goodput_rps=slo.goodput_rps if slo is not None else None,
            tokens_per_s=tokens.output_tokens_per_s if tokens is not None else None,
            goodput_tokens_per_s=slo.goodput_tokens_per_s if slo is not None else None, meets=meets,
            model_busy=_busy(spans[0], spans[1], int(lv.start_ns), int(lv.end_ns)),
            waiting_p50_ms=_waiting(requests, int(lv.start_ns), int(lv.end_ns),
                                    rl.outside_p50_ms if rl is not None else None),
            latency_p50_ms=lv.p50_ms,
            pre_share=rl.shares.get("pre") if rl is not None and rl.requests else None,
            collect_share=rl.batch_collect_share if rl is not None else None,
            batch_p50=rl.batch_size_p50 if rl is not None else None))
    if len(out) < 2:
        return None
    closed = all(c.concurrency for c in out)
    out.sort(key=lambda c: c.concurrency if closed else c.rate)
    heavy = out[-1]
    target = "the SLO" if getattr(load, "slo", None) else ("the p95 budget" if budget is not None else "throughput")
    if target == "throughput":
        knee = load.knee_level
        within = [c for c in out if knee is not None and c.level == knee.level]
    else:
        within = [c for c in out if c.meets]
    cap = within[-1] if within else None
    entry = Capacity(levels=out, target=target, per_replica_level=cap.level if cap else None,
                     per_replica_concurrency=cap.concurrency if cap and closed else None,
                     per_replica_rps=(cap.goodput_rps if cap.goodput_rps is not None else cap.rps) if cap else None,
                     per_replica_tokens_per_s=(cap.goodput_tokens_per_s if cap.goodput_tokens_per_s is not None
                                               else cap.tokens_per_s) if cap else None,
                     next_level=out[out.index(cap) + 1].level if cap is not None and cap is not heavy else None,
                     offered_level=heavy.level, offered_concurrency=heavy.concurrency if closed else None,
                     offered_rps=heavy.rate if not closed else None, replicas=None)
    _saturation(entry, out, closed)
    if cap is None:
        entry.notes.append(f"no level met {target}: one replica's capacity within it is not measured")
    elif closed and cap.concurrency:
        entry.replicas = math.ceil(heavy.concurrency / cap.concurrency)
    elif not closed and entry.per_replica_rps:
        entry.replicas = math.ceil(heavy.rate / entry.per_replica_rps)
    return entry


FLAT = 1.15  # the heaviest level's throughput at most this × the best of the levels with half its load or less
BEHIND = 0.9  # open loop: answers per second below this share of the rate asked at the heaviest level
WAIT_GROWTH_MS = 5.0  # waiting grew by at least this much over the lightest level…
WAIT_SHARE = 0.25  # … and is at least this share of the heaviest level's client latency (p50)
BUSY = 0.8  # the model worked for someone this share of the heaviest level's span
HELD_COLLECT = 0.1  # a batcher held work this share of service time to collect more: its window, not capacity
HELD_PRE = 0.3  # work before the model this share of service time (lightest or heaviest level): preprocessing


def _saturation(entry: Capacity, levels: list[CapacityLevel], closed: bool) -> None:
    """Saturated: throughput stopped growing while the load grew at least 2× (or fell; in open loop: the
    answers fell below 90 % of the rate asked), the requests' waiting
    grew with the load, and the model was working nearly all the heaviest level's time — not held by a
    batcher's wait window nor by preprocessing in front of it (those are fixed inside the server)."""
    heavy, base = levels[-1], levels[0]

    def load_of(c: CapacityLevel) -> float:
        return float(c.concurrency) if closed else c.rate

    lighter = [c for c in levels[:-1] if load_of(c) * 2 <= load_of(heavy)]
    if not lighter or heavy.waiting_p50_ms is None or base.waiting_p50_ms is None:
        return
    ref = max(lighter, key=lambda c: c.rps)
    entry.reference_level = ref.level
    entry.waiting_growth_ms = heavy.waiting_p50_ms - base.waiting_p50_ms
    if (heavy.collect_share or 0.0) >= HELD_COLLECT:
        entry.held_by = "a batch window"
    elif max(heavy.pre_share or 0.0, base.pre_share or 0.0) >= HELD_PRE:
        # the lightest level's share is the request's own make-up, uncontended; at the heaviest the threads
        # of a GIL-bound server wait for the interpreter inside the model's call too, which inflates the
        # forward's span and shrinks the share (CI, 2 cores: 89 % alone, under 30 % at concurrency 16)
        entry.held_by = "preprocessing"
    # closed loop: more clients, no more answers; open loop: the server answered well below the rate asked
    flat = heavy.rps <= FLAT * ref.rps if closed else heavy.rps < BEHIND * heavy.rate
    grew = entry.waiting_growth_ms >= max(WAIT_GROWTH_MS, WAIT_SHARE * (heavy.latency_p50_ms or 0.0))
    busy = heavy.model_busy is not None and heavy.model_busy >= BUSY
    entry.saturated = flat and grew and busy and entry.held_by is None


__all__ = ["Capacity", "CapacityLevel", "assess_capacity"]
