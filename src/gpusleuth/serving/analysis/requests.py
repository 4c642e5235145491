"""What a server's requests spent their time on: ``analyze_requests(run) -> RequestAnalysis | None``.

Reads ``run.requests`` (one row per request the hook saw inside the server, docs/serving.md, "Per-request stages") and the
server process's CPU samples (``run.procs``) and the accelerator's (``run.gpu``) over the requests' span.

The same shares over the requests that ran **alone** (no other request in the server) say what a request
costs when it waits for nothing: a share that is large under load but small alone is waiting that
concurrency creates (a lock around the model, one model instance, a worker pool), not work.

Shares: ``pre``, ``infer`` and ``post`` are shares of the requests' **service time** (the server started
the request → its response was done; they add up to 1), summed over requests, so a slow request weighs
more than a fast one — the share of the server's time, which is what a fix recovers. ``queue`` is the
share of **latency** (queue + service) over the requests whose queue was measured. Requests without a
model forward (health checks, static files) are counted apart and left out of the shares.

A batching server's requests run no forward of their own: ``serving.analysis.batching`` joins them with the forwards
its batcher ran for them, and they count here with a fourth part, ``wait`` (its hand-off to the batcher →
its batch's forward); ``batching`` says how big the batches were and what was left unattributed
(``serving/analysis/batch_stats.py``). Under ``gpusleuth load``, ``split_by_levels`` cuts the same numbers per level and
adds the client's latency against the server's (``serving/analysis/outside_server.py``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from gpusleuth.analysis import intervals as iv
from gpusleuth.analysis.host_telemetry import cores_by_process
from gpusleuth.analysis.telemetry import gpu_busy_in
from gpusleuth.serving.analysis.batch_stats import (LevelMark, batch_rows, batch_size_stats, batch_stats,
                                                    unattributed_note)
from gpusleuth.serving.analysis.batching import BatchJoin, join_batches
from gpusleuth.serving.analysis.follow import elsewhere_note, follow_note, native_note
from gpusleuth.serving.analysis.load import LoadLevel
from gpusleuth.serving.analysis.outside_server import fill_outside
from gpusleuth.serving.analysis.request_model import RequestAnalysis, RequestLevel, StageStats
from gpusleuth.run.model import Run, Table
from gpusleuth.serving.run.request_ids import request_keys

PARTS = ("pre", "wait", "infer", "post")  # wait: for a batch (batching servers; 0 elsewhere)
def analyze_requests(run: Run) -> RequestAnalysis | None:
    r = _without_warmup(run)
    if not len(r) or "forwards" not in r:
        note = native_note(run)  # a server gpusleuth loaded whose requests no hook saw: said, not left silent
        return None if note is None else _nothing(run, note)
    fwd = np.asarray(r["forwards"], dtype=np.int64) > 0
    kinds: dict[str, int] = {}
    for k in r["kind"].tolist():
        kinds[str(k)] = kinds.get(str(k), 0) + 1
    rows = {name: np.asarray(r[name], dtype=np.int64)[fwd] for name in
            ("pid", "start_ns", "end_ns", "queue_ns", "pre_ns", "infer_ns", "post_ns", "forwards", "batch")}
    rows["wait_ns"] = np.zeros(int(fwd.sum()), dtype=np.int64)
    rows["request_id"] = _ids(r)[fwd]
    first = np.asarray(r["first_forward_ns"], dtype=np.int64)[fwd] if "first_forward_ns" in r else \
        np.full(int(fwd.sum()), -1, np.int64)
    rows["prefill_ns"] = first  # a generation's first forward; the others are its decode
    rows["decode_ns"] = np.where(first >= 0, np.maximum(rows["infer_ns"] - first, 0), -1)
    rows["stages"] = np.asarray(r["stages"], dtype=object)[fwd] if "stages" in r else np.full(fwd.sum(), "{}",
                                                                                                   object)
    own = rows = _with_batched(rows, r, None)
    no_forward = len(r) - int(fwd.sum())
    join, batching, batches, note = None, None, {}, None
    try:
        join = join_batches(r, run.batches)
        if join is not None and len(join.index):
            rows = _with_batched(rows, r, join)
            batching = batch_stats(join, run)
        batches = batch_rows(join, run)
        note = _notes(unattributed_note(join, no_forward),
                      follow_note(r, join.index if join is not None else None, run.batches), elsewhere_note(run, r))
    except Exception as exc:  # noqa: BLE001 - one bad join must not cost the requests that ran in-request
        rows, batching, batches = own, None, {}
        note = _failed_join_note(no_forward, len(run.batches), exc)
    n = len(rows["start_ns"])
    if not n:
        return _nothing(run, note, no_forward=len(r), kinds=kinds)
    start, end = rows["start_ns"], rows["end_ns"]
    lo, hi = int(start.min()), int(end.max())
    us, ue = iv.union(start, end)
    busy = float((ue - us).sum()) / 1e9
    service = (end - start).astype(np.float64)
    summary = _summary(rows)
    stages = _named_stages(rows["stages"], float(service.sum()))
    pids = sorted(set(rows["pid"].tolist()) | _model_pids(run, batches))
    cores, cores_p90 = _server_cpu(run, pids, lo, hi)
    gpu_busy, mem = _gpu(run, lo, hi)
    batch = rows["batch"][rows["batch"] >= 0]
    span = (hi - lo) / 1e9
    alone = _alone(start, end)
    alone_shares = _summary({k: v[alone] for k, v in rows.items()})["shares"] if alone.any() else {}
    return RequestAnalysis(
        count=n, no_forward=len(r) - n, kinds=kinds, pids=pids, span_s=span, busy_s=busy,
        service_s=float(service.sum()) / 1e9, rps=n / span if span > 0 else 0.0,
        in_flight=float(service.sum()) / 1e9 / busy if busy > 0 else 0.0,
        shares=summary["shares"], parts=summary["parts"], stages=stages,
        queue_measured=summary["queue_measured"], queue_p95_share=summary["queue_p95_share"],
        latency_p50_ms=summary["p50_ms"], latency_p95_ms=summary["p95_ms"],
        forwards_per_request=float(rows["forwards"].mean()), batch_p50=float(np.median(batch)) if len(batch) else None,
        server_cores=cores, server_cores_p90=cores_p90, logical_cores=_cores(run), gpu_busy=gpu_busy,
        gpu_mem_share=mem, alone_requests=int(alone.sum()), alone_shares=alone_shares, _rows=rows,
        batching=batching, note=note, _batches=batches, framework=serving_framework(run),
    )


def _nothing(run: Run, note: str | None, no_forward: int = 0, kinds: dict[str, int] | None = None) -> RequestAnalysis:
    """No request with a model forward to split: the count of those without one, and why (``note``)."""
    return RequestAnalysis(count=0, no_forward=no_forward, kinds=kinds or {}, pids=[], span_s=0.0, busy_s=0.0,
                           service_s=0.0, rps=0.0, in_flight=0.0, shares={}, parts={}, stages=[], queue_measured=0,
                           queue_p95_share=None, latency_p50_ms=0.0, latency_p95_ms=0.0, forwards_per_request=0.0,
                           batch_p50=None, server_cores=None, server_cores_p90=None, logical_cores=_cores(run),
                           gpu_busy=None, gpu_mem_share=None, note=note, framework=serving_framework(run))


# a joined request's columns besides the ones every request has: -1 (unmeasured) on the requests that ran their own
# forwards, so the rows have one set of columns whether or not any request was joined (a batcher whose forwards ran
# while no request could be tied to them — BentoML's deque — left them out, and the per-level split raised KeyError)
JOINED_ONLY = ("queued_ns", "collect_ns", "own_ns", "behind_ns", "behind_steps", "model_ns")


def _without_warmup(run: Run) -> Table:
    """The server's requests less those ``gpusleuth load``'s warm-up sent (they started inside its window, before
    the first level): a cold server's start is reported apart from every level (meta ``load.warmup``), and must
    not weigh in the server's shares either."""
    r = run.requests
    load = run.meta.get("load")
    w = load.get("warmup") if isinstance(load, dict) else None
    if not len(r) or not isinstance(w, dict) or not isinstance(w.get("start_ns"), int) or \
            not isinstance(w.get("end_ns"), int):
        return r
    start = np.asarray(r["start_ns"], dtype=np.int64)
    keep = (start < w["start_ns"]) | (start > w["end_ns"])
    return r if keep.all() else r.filter(keep)


def _with_batched(rows: dict[str, np.ndarray], r: Table, join: BatchJoin | None) -> dict[str, np.ndarray]:
    """The requests served by forwards outside them, added to the rows with their joined parts; kept apart
    in ``batched`` (a mask) for the batching numbers. With no join: the rows of the requests with their own
    forwards, with every joined-only column at -1 and ``batched`` all False."""
    if join is None:
        n = len(rows["start_ns"])
        out = {k: v for k, v in rows.items() if k != "batched"}
        for k in JOINED_ONLY:
            out.setdefault(k, np.full(n, -1, dtype=np.int64))
        out["batched"] = np.zeros(n, bool)
        return out
    i = join.index
    p = join.parts
    add = {"pid": np.asarray(r["pid"], dtype=np.int64)[i], "start_ns": np.asarray(r["start_ns"], dtype=np.int64)[i],
           "end_ns": np.asarray(r["end_ns"], dtype=np.int64)[i],
           "queue_ns": np.asarray(r["queue_ns"], dtype=np.int64)[i], "request_id": _ids(r)[i],
           "stages": np.asarray(r["stages"], dtype=object)[i] if "stages" in r else np.full(len(i), "{}", object)}
    for k in ("pre_ns", "wait_ns", "infer_ns", "post_ns", "forwards", "batch", "queued_ns", "collect_ns", "own_ns",
              "prefill_ns", "decode_ns", "behind_ns", "behind_steps", "model_ns"):
        add[k] = p[k]
    n_own = len(rows["start_ns"])
    out = {}
    rows = {k: v for k, v in rows.items() if k != "batched"}
    for k in set(rows) | set(add):
        old = rows.get(k)
        if old is None:
            old = np.full(n_own, -1, dtype=np.int64)
        out[k] = np.concatenate([old, add[k]])
    out["batched"] = np.concatenate([np.zeros(n_own, bool), np.ones(len(i), bool)])
    order = np.argsort(out["start_ns"], kind="stable")
    return {k: v[order] for k, v in out.items()}


def _notes(*sentences: str | None) -> str | None:
    return "; ".join(s for s in sentences if s) or None


def _model_pids(run: Run, batches: dict[str, np.ndarray]) -> set[int]:
    """The processes whose forwards served the requests (LitServe's inference worker, a Ray replica): one server
    with the processes that opened the requests, for its CPU."""
    if not batches or "members" not in batches or "pid" not in run.batches:
        return set()
    pid = np.asarray(run.batches["pid"], dtype=np.int64)
    return set(pid[batches["members"] > 0].tolist())


def _failed_join_note(no_forward: int, outside: int, exc: Exception) -> str:
    """The sentence for a join of requests to a batcher's forwards that raised: the requests stay, unattributed."""
    what = str(exc).replace("\n", " ")[:120]
    return (f"joining the {no_forward:,} requests without a model forward of their own to the {outside:,} forwards "
            f"that ran outside any request failed ({exc.__class__.__name__}: {what}); their wait for a batch and "
            "their share of it are not attributed")


def _ids(r: Table) -> np.ndarray:
    """The client's X-Request-Id per request row, as text ("" none, and in runs from before it was recorded)."""
    return request_keys(r["request_id"]) if "request_id" in r else np.full(len(r), "", dtype=object)


def _alone(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which requests no other request (with a forward, in any server process) overlapped in time."""
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    prev_end = np.concatenate(([np.iinfo(np.int64).min], np.maximum.accumulate(e)[:-1]))
    next_start = np.concatenate((s[1:], [np.iinfo(np.int64).max]))
    out = np.zeros(len(start), dtype=bool)
    out[order] = (s >= prev_end) & (e <= next_start)
    return out


def _summary(rows: dict[str, np.ndarray]) -> dict[str, Any]:
    """Shares, per-part percentiles and the queue's weight in the slowest requests, for a set of rows."""
    service = (rows["end_ns"] - rows["start_ns"]).astype(np.float64)
    total = float(service.sum())
    queue = rows["queue_ns"]
    measured = queue >= 0
    latency = service + np.where(measured, queue, 0)
    parts, shares = {}, {}
    for name in PARTS:
        v = np.maximum(rows[f"{name}_ns"], 0).astype(np.float64)
        shares[name] = float(v.sum()) / total if total > 0 else 0.0
        parts[name] = _stat(name, v, shares[name], len(v))
    q_share, q_p95 = None, None
    if measured.any():
        qv = queue[measured].astype(np.float64)
        lat = latency[measured]
        q_share = float(qv.sum() / lat.sum()) if lat.sum() > 0 else 0.0
        shares["queue"] = q_share
        parts["queue"] = _stat("queue", qv, q_share, int(measured.sum()))
        q_p95 = _queue_part_of_p95(lat, lat - qv)
    return {"shares": shares, "parts": parts, "queue_measured": int(measured.sum()), "queue_p95_share": q_p95,
            "p50_ms": float(np.percentile(latency, 50)) / 1e6, "p95_ms": float(np.percentile(latency, 95)) / 1e6}


def _queue_part_of_p95(latency: np.ndarray, service: np.ndarray) -> float:
    """How much of the p95 latency the queue makes: 1 − p95(latency without the queue) / p95(latency).

    A quantile, not the queue's share of the slowest requests' sum: the first request of each keep-alive
    connection waits for its handler thread to start, and on a busy host one such wait of 64 ms among 120
    requests made 23–31 % of the slowest six's latency — a "queueing" finding from one request. The p95
    moves only when more than 5 % of the requests wait, and this is the very ratio the finding's gain
    predicts (p95 latency without the queue)."""
    with_q = float(np.percentile(latency, 95))
    if with_q <= 0:
        return 0.0
    return min(max(1.0 - float(np.percentile(service, 95)) / with_q, 0.0), 1.0)


def _stat(name: str, v: np.ndarray, share: float, n: int) -> StageStats:
    return StageStats(name=name, share=share, total_s=float(v.sum()) / 1e9,
                      p50_ms=float(np.percentile(v, 50)) / 1e6 if len(v) else 0.0,
                      p95_ms=float(np.percentile(v, 95)) / 1e6 if len(v) else 0.0, requests=n)


def _named_stages(texts: np.ndarray, service_ns: float) -> list[StageStats]:
    per: dict[str, list[int]] = {}
    for text in texts.tolist():
        if not text or text == "{}":
            continue
        try:
            d = json.loads(text)
        except (TypeError, ValueError):
            continue
        if isinstance(d, dict):
            for k, ns in d.items():
                if isinstance(ns, int):
                    per.setdefault(str(k), []).append(ns)
    out = [_stat(k, np.asarray(v, dtype=np.float64), float(np.sum(v)) / service_ns if service_ns > 0 else 0.0,
                 len(v)) for k, v in per.items()]
    return sorted(out, key=lambda s: -s.total_s)


SERVING_FRAMEWORKS = ("litserve", "ray_serve", "bentoml")  # what the hook's follow patches name (_gpusleuth_serve)


def serving_framework(run: Run) -> str | None:
    """The serving framework whose modules the hook patched (its ``serving_framework`` fact, written by the
    process that imported them), None where none was seen. Only the names the hook writes are kept: the fact
    comes from a run directory, which may be anyone's."""
    for info in run.infos:
        if info.get("kind") == "serving_framework" and info.get("name") in SERVING_FRAMEWORKS:
            return str(info["name"])
    return None


def _cores(run: Run) -> int | None:
    host = (run.meta.get("recorder") or {}).get("host") or {}
    return host.get("logical_cores")


def _server_cpu(run: Run, pids: list[int], lo: int, hi: int) -> tuple[float | None, float | None]:
    """The server processes' CPU over [lo, hi], in cores: mean and p90 over the sampling times."""
    got = cores_by_process(run.procs, (lo, hi), pids) if pids else None
    return (got.mean, got.p90) if got is not None else (None, None)


def _gpu(run: Run, lo: int, hi: int) -> tuple[float | None, float | None]:
    """The window's GPU busy share (``gpu_busy_in``, the one rule for it) and its peak memory share."""
    g = run.gpu
    busy = gpu_busy_in(g, lo, hi)
    if busy is None:
        return None, None
    mem = None
    if "mem_used" in g and "mem_total" in g:
        t = np.asarray(g["t_ns"], dtype=np.int64)
        m = (t >= lo) & (t <= hi)
        used = np.asarray(g["mem_used"], dtype=np.float64)[m]
        tot = np.asarray(g["mem_total"], dtype=np.float64)[m]
        ok = np.isfinite(used) & np.isfinite(tot) & (tot > 0)
        mem = float(np.max(used[ok] / tot[ok])) if ok.any() else None
    return busy, mem


def split_by_levels(ra: RequestAnalysis, run: Run, levels: list[LoadLevel]) -> list[RequestLevel]:
    """The requests of each load level (``serving.analysis.load.LoadLevel``: ``level``, ``concurrency``, ``rate``,
    ``start_ns``, ``end_ns``), by the time each request started."""
    rows = ra._rows
    if not rows or not levels:
        return []
    series = ra.batching.over_time if ra.batching is not None else None
    if series is not None:
        series.levels = [LevelMark(concurrency=lv.concurrency, rate=lv.rate,
                                   start_s=(int(lv.start_ns) - series.origin_ns) / 1e9) for lv in levels]
    out = []
    for lv in levels:
        s, e = int(lv.start_ns), int(lv.end_ns)
        m = (rows["start_ns"] >= s) & (rows["start_ns"] < e)
        n = int(m.sum())
        span = (e - s) / 1e9
        if not n:
            out.append(RequestLevel(level=lv.level, concurrency=lv.concurrency, rate=lv.rate, requests=0,
                                    shares={}, p95_ms=None, queue_p95_share=None, rps=0.0, server_cores=None,
                                    gpu_busy=None))
            continue
        sm = _summary({k: v[m] for k, v in rows.items()})
        cores, _ = _server_cpu(run, ra.pids, s, e)
        busy, _ = _gpu(run, s, e)
        level = RequestLevel(level=lv.level, concurrency=lv.concurrency, rate=lv.rate, requests=n,
                             shares=sm["shares"], p95_ms=sm["p95_ms"], queue_p95_share=sm["queue_p95_share"],
                             rps=n / span if span > 0 else 0.0, server_cores=cores, gpu_busy=busy)
        fill_outside(level, run, rows, m, lv)
        b = ra._batches
        if b:
            inside = (b["start_ns"] >= s) & (b["start_ns"] < e) & (b["members"] > 0)
            level.batch_forwards = int(inside.sum())
            (level.batch_size_p50, level.batch_size_p90, level.batch_size_max,
             level.batch_sizes) = batch_size_stats(b["members"][inside])
            took = m & rows["batched"] & (rows["queued_ns"] >= 0)
            service = float((rows["end_ns"][took] - rows["start_ns"][took]).sum())
            if service > 0:
                level.batch_queued_share = float(rows["queued_ns"][took].sum()) / service
                level.batch_collect_share = float(rows["collect_ns"][took].sum()) / service
        out.append(level)
    return out



__all__ = ["RequestAnalysis", "RequestLevel", "StageStats", "analyze_requests", "split_by_levels"]
