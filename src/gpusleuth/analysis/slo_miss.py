"""Why requests missed their SLO: ``explain_misses(run, load, requests) -> list[MissLevel]``.

``gpusleuth load --slo … -- CMD`` records both sides: the client's verdict on each answered request
(``analysis.load_tokens.request_verdicts``, the same one attainment counts) and the server's record of it
(the hook's ``R`` line, joined on the ``X-Request-Id`` the client sent). Each request's client latency is cut
into parts that add up to it:

* ``outside`` — the client's end-to-end time minus the server's queue + service: the network, the listen
  backlog, connection handling before the server started it, the generator's own lateness in open loop;
* ``queue``, ``pre`` (before the model: tokenization, preprocessing), ``wait`` (for a batch);
* ``prefill`` (the first forward) and ``decode`` (the other forwards) — a generation's;
* ``post`` (the rest inside the server: between and after the forwards, writing the stream).

A miss is explained by what grew: each part's p50 over the level's missed requests against the same part's
p50 over the **lightest level's** answered requests (a request with the server nearly to itself). The part
with the largest excess is the reason; when the lightest level misses too, its requests' own cost is over
the budget. Decode per output token (decode ÷ forwards after the first) says whether decode slowed as more
sequences shared the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gpusleuth.analysis.load_tokens import request_verdicts
from gpusleuth.analysis.load import LoadAnalysis
from gpusleuth.run.model import Run

if TYPE_CHECKING:  # requests.py holds a list of MissLevel: importing it here at run time would be a cycle
    from gpusleuth.analysis.requests import RequestAnalysis

PARTS = ("outside", "queue", "pre", "wait", "prefill", "decode", "post")
BEFORE_FIRST_TOKEN = ("outside", "queue", "pre", "wait", "prefill")
MIN_JOINED = 5


@dataclass
class MissLevel:
    level: int
    concurrency: int
    rate: float
    answered: int
    missed: int  # answered requests over at least one budget
    joined: int  # of the missed, joined to the server's record on X-Request-Id
    missed_by: dict[str, int]  # budget → answered requests over it
    parts_ms: dict[str, float]  # p50 of each part over the joined missed requests
    baseline_ms: dict[str, float]  # p50 of each part over the lightest level's answered requests
    excess_ms: dict[str, float]  # parts_ms − baseline_ms
    dominant: str | None  # the part that grew most (among those before the first token for TTFT-only misses)
    baseline_level: int  # the lightest level's index
    decode_per_token_ms: float | None = None  # over the joined missed requests, p50
    baseline_decode_per_token_ms: float | None = None
    ttft_only: bool = False  # every missed request missed only its TTFT budget
    notes: list[str] = field(default_factory=list)


def _server_parts(rows: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
    """request id → [latency ns, queue, pre, wait, prefill, decode, post, decode forwards] of the server's rows."""
    ids = rows.get("request_id")
    if ids is None or not (ids >= 0).any():
        return {}
    n = len(ids)

    def col(name: str) -> np.ndarray:
        v = rows.get(name)
        return np.maximum(v, 0) if v is not None else np.zeros(n, np.int64)

    infer = col("infer_ns")
    prefill = np.where(rows["prefill_ns"] >= 0, rows["prefill_ns"], infer) if "prefill_ns" in rows else infer
    decode = np.where(rows["decode_ns"] >= 0, rows["decode_ns"], infer - prefill) if "decode_ns" in rows \
        else infer - prefill
    queue = col("queue_ns")
    latency = rows["end_ns"] - rows["start_ns"] + queue
    table = np.stack([latency, queue, col("pre_ns"), col("wait_ns"), prefill, np.maximum(decode, 0),
                      col("post_ns"), np.maximum(rows["forwards"] - 1, 0)], axis=1)
    return {int(i): table[k] for k, i in enumerate(ids.tolist()) if i >= 0}


def _parts_of(client_ns: np.ndarray, ids: np.ndarray, server: dict[int, np.ndarray]) -> np.ndarray:
    """Rows [outside, queue, pre, wait, prefill, decode, post, decode forwards] (ns) of the joined requests."""
    out = []
    for c, i in zip(client_ns.tolist(), ids.tolist()):
        s = server.get(int(i))
        if s is None:
            continue
        out.append([max(c - int(s[0]), 0), *s[1:].tolist()])
    return np.asarray(out, dtype=np.float64).reshape(-1, len(PARTS) + 1)


def _p50s(parts: np.ndarray) -> dict[str, float]:
    return {name: float(np.median(parts[:, k])) / 1e6 for k, name in enumerate(PARTS)} if len(parts) else {}


def _per_token(parts: np.ndarray) -> float | None:
    many = parts[:, len(PARTS)] > 0
    if not many.any():
        return None
    return float(np.median(parts[many, PARTS.index("decode")] / parts[many, len(PARTS)])) / 1e6


def explain_misses(run: Run, load: LoadAnalysis | None, requests: RequestAnalysis | None) -> list[MissLevel]:
    """Per level with misses and a server record to join them to (empty: no SLO, no LLM load, no server
    record, or nothing missed)."""
    if load is None or not load.slo or requests is None or not len(run.load) or "request_id" not in run.load:
        return []
    server = _server_parts(requests._rows)
    if not server:
        return []
    ld = {k: np.asarray(run.load[k]) for k in run.load.columns}
    need = ("level", "start_ns", "end_ns", "status", "error", "first_token_ns", "output_tokens")
    if not all(k in ld for k in need):
        return []
    level = ld["level"].astype(np.int64)
    status, error = ld["status"].astype(np.int64), ld["error"].astype(str)
    answered = (status >= 200) & (status < 300) & (error == "")
    levels = sorted(load.levels, key=lambda lv: (lv.concurrency or 0, lv.rate))
    if not levels:
        return []

    def client(ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (ld["end_ns"][ok].astype(np.int64) - ld["start_ns"][ok].astype(np.int64),
                ld["request_id"][ok].astype(np.int64))

    base_lv = levels[0]
    base_parts = _parts_of(*client(answered & (level == base_lv.level)), server)
    base = _p50s(base_parts)
    out = []
    for lv in levels:
        ok = answered & (level == lv.level)
        if not ok.any():
            continue
        good, over_by = request_verdicts(ld, ok, load.slo)
        missed = ~good
        if not missed.any():
            continue
        c_ns, ids = client(ok)
        parts = _parts_of(c_ns[missed], ids[missed], server)
        ttft_only = "ttft_ms" in over_by and all(
            not (v[missed] & ~over_by["ttft_ms"][missed]).any() for k, v in over_by.items() if k != "ttft_ms")
        entry = MissLevel(level=lv.level, concurrency=lv.concurrency, rate=lv.rate, answered=int(ok.sum()),
                          missed=int(missed.sum()), joined=len(parts),
                          missed_by={k: int(v.sum()) for k, v in over_by.items()}, parts_ms={}, baseline_ms=base,
                          excess_ms={}, dominant=None, baseline_level=base_lv.level, ttft_only=ttft_only)
        if len(parts) < MIN_JOINED or not base:
            entry.notes.append(f"{len(parts)} of {entry.missed} missed requests joined the server's records on "
                               "X-Request-Id: too few to say why they missed")
            out.append(entry)
            continue
        entry.parts_ms = _p50s(parts)
        entry.excess_ms = {k: entry.parts_ms[k] - base.get(k, 0.0) for k in PARTS}
        pool = BEFORE_FIRST_TOKEN if ttft_only else PARTS
        top = max(pool, key=lambda k: entry.excess_ms[k])
        entry.dominant = top if entry.excess_ms[top] > 0 else None
        entry.decode_per_token_ms = _per_token(parts)
        entry.baseline_decode_per_token_ms = _per_token(base_parts) if len(base_parts) else None
        out.append(entry)
    return out


__all__ = ["BEFORE_FIRST_TOKEN", "MissLevel", "PARTS", "explain_misses"]
