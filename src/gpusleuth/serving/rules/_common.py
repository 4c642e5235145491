"""What the serving rule families share (``serving_request_path``, ``serving_batching``, ``serving_slo``): how
many requests say anything about a server, how a fix is priced on the server's busy time, and whether throughput
kept growing with concurrency under ``gpusleuth load``.

Why one place: every serving rule prices its gain the same way — the share of the server's busy time (some
request in flight) a fix gives back, as a throughput ratio — not on a training loop; a server has no loop.
"""

from __future__ import annotations

from typing import NamedTuple

from gpusleuth.diagnosis.facts import Facts, LoadLevel, RequestAnalysis
from gpusleuth.diagnosis.finding import Gain

MIN_REQUESTS = 20  # fewer requests than this say too little about a server
FLAT_RPS = 1.3  # throughput grew less than this while concurrency grew ≥ 4×: flat
ACCEL_NOT_FULL = 0.6
SOURCE = "hook: per-request stages"


def pct(x: float) -> float:
    return round(x * 100, 1)


def busy_gain(facts: Facts, share: float, busy_s: float, method: str) -> Gain:
    """``share`` of the server's busy time given back: a throughput ratio of 1 / (1 − share)."""
    share = min(max(share, 0.0), 0.999)
    saved = busy_s * share
    wall = facts.outcomes.wall_s
    return Gain(step_share=share, wall_share=min(saved / wall, 1.0) if wall else 0.0, seconds_per_run=saved,
                speedup=1.0 / (1.0 - share), method=method,
                dollars_per_run=saved * facts.dollars_per_second if facts.dollars_per_second is not None else None)


class Scaling(NamedTuple):
    """Throughput against concurrency between two closed-loop levels of ``gpusleuth load``."""

    rps_ratio: float
    concurrency_ratio: float
    lo: LoadLevel  # the reference level
    hi: LoadLevel  # the highest level


def load_scaling(facts: Facts) -> Scaling | None:
    """Did throughput keep growing with concurrency? (throughput ratio, concurrency ratio, reference level,
    highest level): the highest closed-loop level of ``gpusleuth load`` against the highest level with at
    most a quarter of its concurrency — a server bound by one core's GIL plateaus early (its lowest levels
    still gain from overlapping the clients' round trips), a batching one keeps growing. None without two
    such levels."""
    levels = sorted((lv for lv in (facts.load.levels if facts.load is not None else [])
                     if lv.concurrency and lv.rps > 0), key=lambda lv: lv.concurrency)
    if len(levels) < 2:
        return None
    hi = levels[-1]
    ref = [lv for lv in levels[:-1] if lv.concurrency * 4 <= hi.concurrency]
    if not ref:
        return None
    lo = ref[-1]
    return Scaling(hi.rps / lo.rps, hi.concurrency / lo.concurrency, lo, hi)


def enough_requests(facts: Facts) -> RequestAnalysis | None:
    """The server's requests, or None where there are fewer than ``MIN_REQUESTS`` (or none: not a server)."""
    ra = facts.requests
    return ra if ra is not None and ra.count >= MIN_REQUESTS else None
