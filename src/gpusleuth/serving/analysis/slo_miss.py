"""Why requests missed their SLO: ``explain_misses(run, load, requests) -> list[MissLevel]``.

``gpusleuth load --slo … -- CMD`` records both sides: the client's verdict on each answered request
(``serving.analysis.tokens.request_verdicts``, the same one attainment counts) and the server's record of it
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

On an engine whose forwards were joined to the requests (serving/analysis/batching.py), the missed requests whose
TTFT grew past the lightest level's p90 are also read for **prefill delayed by others' decode**: the other
sequences' decode-only forwards each waited behind, with a slot free, between being queued and its own
first forward — summed, their p50, and their share of those requests' client TTFT.
"""

from __future__ import annotations


import numpy as np

from gpusleuth.serving.analysis.tokens import request_verdicts
from gpusleuth.serving.analysis.load import LoadAnalysis
from gpusleuth.run.model import Run
from gpusleuth.serving.run.request_ids import join_on_ids, request_keys
from gpusleuth.serving.analysis.request_model import MissLevel, RequestAnalysis

PARTS = ("outside", "queue", "pre", "wait", "prefill", "decode", "post")
BEFORE_FIRST_TOKEN = ("outside", "queue", "pre", "wait", "prefill")
MIN_JOINED = 5


def _server_parts(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """request id → [latency ns, queue, pre, wait, prefill, decode, post, decode forwards, behind others' decode
    ns, steps] of the server's rows (ids the server saw more than once are left out: serving/run/request_ids.py)."""
    ids = rows.get("request_id")
    if ids is None or not len(ids):
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
    behind = rows["behind_ns"] if "behind_ns" in rows else np.full(n, -1, np.int64)  # -1: not joined to forwards
    steps = rows["behind_steps"] if "behind_steps" in rows else np.full(n, -1, np.int64)
    table = np.stack([latency, queue, col("pre_ns"), col("wait_ns"), prefill, np.maximum(decode, 0),
                      col("post_ns"), np.maximum(rows["forwards"] - 1, 0), behind, steps], axis=1)
    keys = request_keys(ids)
    _, once = join_on_ids(keys, keys)
    return {str(keys[k]): table[k] for k in once.tolist()}


FWD, BEHIND, STEPS, TTFT = (len(PARTS) + k for k in range(4))  # the columns after the parts in _parts_of's rows


def _parts_of(client_ns: np.ndarray, ttft_ns: np.ndarray, ids: np.ndarray, server: dict[str, np.ndarray]) -> np.ndarray:
    """Rows [outside, queue, pre, wait, prefill, decode, post, decode forwards, behind others' decode, its steps,
    the client's TTFT] (ns) of the joined requests."""
    out = []
    keys = request_keys(ids)
    _, once = join_on_ids(keys, keys)  # an id the client sent twice joins neither answer
    for c, t, i in zip(client_ns[once].tolist(), ttft_ns[once].tolist(), keys[once].tolist()):
        s = server.get(i)
        if s is None:
            continue
        out.append([max(c - int(s[0]), 0), *s[1:].tolist(), t])
    return np.asarray(out, dtype=np.float64).reshape(-1, TTFT + 1)


def _behind_decode(entry: "MissLevel", parts: np.ndarray, base_ttft_ns: np.ndarray) -> None:
    """Fill ``entry``'s prefill-behind-decode numbers from its joined missed requests whose TTFT grew."""
    if not len(base_ttft_ns):
        return
    p90 = float(np.percentile(base_ttft_ns, 90))
    grew = parts[(parts[:, TTFT] > p90) & (parts[:, BEHIND] >= 0)]
    entry.baseline_ttft_p90_ms = p90 / 1e6
    entry.ttft_grew = len(grew)
    if not len(grew) or grew[:, TTFT].sum() <= 0:
        return
    entry.behind_decode_share = float(grew[:, BEHIND].sum() / grew[:, TTFT].sum())
    entry.behind_decode_p50_ms = float(np.median(grew[:, BEHIND])) / 1e6
    entry.behind_steps_p50 = float(np.median(grew[:, STEPS]))
    entry.behind_decode_ms = float(grew[:, BEHIND].sum()) / 1e6
    entry.ttft_p50_ms = float(np.median(grew[:, TTFT])) / 1e6


def _p50s(parts: np.ndarray) -> dict[str, float]:
    return {name: float(np.median(parts[:, k])) / 1e6 for k, name in enumerate(PARTS)} if len(parts) else {}


def _per_token(parts: np.ndarray) -> float | None:
    many = parts[:, FWD] > 0
    if not many.any():
        return None
    return float(np.median(parts[many, PARTS.index("decode")] / parts[many, FWD])) / 1e6


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

    def client(ok: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        start, end = ld["start_ns"][ok].astype(np.int64), ld["end_ns"][ok].astype(np.int64)
        first = ld["first_token_ns"][ok].astype(np.int64)
        return end - start, np.where(first > 0, first - start, end - start), ld["request_id"][ok]

    base_lv = levels[0]
    base_client = client(answered & (level == base_lv.level))
    base_ttft = base_client[1]
    base_parts = _parts_of(*base_client, server)
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
        c_ns, ttft, ids = client(ok)
        parts = _parts_of(c_ns[missed], ttft[missed], ids[missed], server)
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
        _behind_decode(entry, parts, base_ttft)
        out.append(entry)
    return out


__all__ = ["BEFORE_FIRST_TOKEN", "MissLevel", "PARTS", "explain_misses"]
