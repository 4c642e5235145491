"""Requests followed by identity into the forwards that ran for them, wherever those ran (issue 32).

The hook (``hook/_gpusleuth_follow.py``) writes on a request's ``R`` line the key its work was followed by
(``follow_key``: LitServe's uid found in the item it put on a multiprocessing queue, Ray Serve's request id; ``?``
when the work went to another process with no id in it), and on each forward that ran outside any request the
keys of the requests it ran for (``keys``: ``key/taken_ns,…``; ``taken_ns`` -1 where the take was not seen). A
request's forwards are then the forwards that name it — in any process of the server — not the forwards that
happened to run inside its time window: a batch's size is what it took.

``follow_note`` is the sentence for the requests that could not be followed, with the count and the reason;
``elsewhere_note`` the one for a server whose requests ran no model and handed their work over by nothing the
hook sees (a socket, shared memory) while another of its processes worked: silence there read as "no rule had
the data". ``native_note`` the one for a server that ``gpusleuth load`` started and loaded but in which the hook saw
no request at all: its HTTP and its scheduler are native code (llama.cpp's C++ server, in ``llama-server`` or a
Python wheel that embeds it), where a request's wait for a slot has no Python to be followed in.
"""

from __future__ import annotations

import numpy as np

from gpusleuth.analysis.host_telemetry import cores_by_process
from gpusleuth.run.model import Run, Table

NO_KEY = "?"
ELSEWHERE_CORES = 0.2  # the server's other processes busier than this while its requests ran no model: it ran there


def forward_keys(batches: Table) -> tuple[dict[str, list[int]], dict[str, int], np.ndarray]:
    """(key → its forwards' row indices in start order, key → when the consumer took its work (ns), which
    forwards name their requests)."""
    n = len(batches)
    keyed = np.zeros(n, dtype=bool)
    by_key: dict[str, list[int]] = {}
    taken: dict[str, int] = {}
    if not n or "keys" not in batches:
        return by_key, taken, keyed
    starts = np.asarray(batches["start_ns"], dtype=np.int64)
    for j in np.argsort(starts, kind="stable").tolist():
        text = batches["keys"][j]
        if not isinstance(text, str) or not text:
            continue
        keyed[j] = True
        for part in text.split(","):
            key, _, t = part.partition("/")
            if not key or key == NO_KEY:
                continue
            by_key.setdefault(key, []).append(j)
            try:
                tv = int(t)
            except ValueError:
                tv = -1
            if tv > 0 and key not in taken:
                taken[key] = tv
    return by_key, taken, keyed


def request_follow_keys(requests: Table) -> np.ndarray:
    n = len(requests)
    if "follow_key" not in requests:
        return np.full(n, "", dtype=object)
    return np.asarray([k if isinstance(k, str) else "" for k in requests["follow_key"]], dtype=object)


def follow_note(requests: Table, joined: np.ndarray | None, batches: Table) -> str | None:
    """One sentence for the requests whose work went to another process or batch and could not be followed
    to a forward there (count and reason), or None. ``joined``: rows of ``requests`` the join tied to forwards."""
    if not len(requests) or "follow_key" not in requests or "handoff_ns" not in requests:
        return None
    keys = request_follow_keys(requests)
    handed = np.asarray(requests["handoff_ns"], dtype=np.int64) >= 0
    own = np.asarray(requests["forwards"], dtype=np.int64) > 0 if "forwards" in requests else np.zeros(len(keys), bool)
    done = np.zeros(len(keys), dtype=bool)
    if joined is not None and len(joined):
        done[joined] = True
    cand = handed & ~own & ~done & (keys != "")
    no_id = int((cand & (keys == NO_KEY)).sum())
    # answered with an error before any forward took their work: shed by the server (a batcher that rejects work
    # that would wait past its latency budget — BentoML answers 503), not lost by the follow
    status = np.asarray(requests["status"], dtype=np.int64) if "status" in requests else np.zeros(len(keys), np.int64)
    shed_rows = cand & (keys != NO_KEY) & (status >= 400)
    shed = int(shed_rows.sum())
    lost = int((cand & (keys != NO_KEY)).sum()) - shed
    if not no_id and not lost and not shed:
        return None
    total = int((handed & ~own & (keys != "")).sum())
    parts = []
    if shed:
        codes, counts = np.unique(status[shed_rows], return_counts=True)
        said = ", ".join(f"{int(n):,}×{int(c)}" for c, n in sorted(zip(codes, counts), key=lambda x: -x[1]))
        parts.append(f"{shed:,} were answered with an error ({said}) and no forward took their work (the server shed "
                     "them, as a batcher does with work that would wait past its latency budget)")
    if no_id:
        parts.append(f"{no_id:,} put their work on a multiprocessing queue or pipe with no id in it that gpusleuth can "
                     "follow (no text like a UUID or request id among the item's top-level fields)")
    if lost:
        recorded = len(batches) if "keys" in batches else 0
        where = ("no forward recorded in the server's other processes named them (the worker process ran without "
                 "gpusleuth's hook — started outside this job, or killed before it wrote — or it ran no torch "
                 "module)") if not recorded else \
            (f"none of the {recorded:,} forwards recorded outside any request named them (their work was taken by "
             "something that did not hand it to a torch module gpusleuth times)")
        parts.append(f"{lost:,} handed their work to another process or batch by an id but {where}")
    return (f"{sum((no_id, lost, shed)):,} of {total:,} requests whose model ran elsewhere could not be followed to its "
            f"forward: " + "; ".join(parts) + " — their wait for a batch and their forward are not attributed")


def elsewhere_note(run: Run, requests: Table) -> str | None:
    """One sentence for requests that ran no forward and handed their work over by no channel the hook follows,
    in a server where no request ran a forward and none ran outside a request, while the server's other processes
    (not those that opened the requests) used at least ``ELSEWHERE_CORES`` during them: the model most likely ran
    there, reached through a socket, shared memory or a pipe of the server's own. None otherwise (a server whose
    requests need no model — health checks, static files — and no other process busy says nothing)."""
    n = len(requests)
    if not n or "forwards" not in requests or len(run.batches):
        return None
    if (np.asarray(requests["forwards"], dtype=np.int64) > 0).any():
        return None
    handed = np.asarray(requests["handoff_ns"], dtype=np.int64) >= 0 if "handoff_ns" in requests else \
        np.zeros(n, dtype=bool)
    unseen = ~handed & (request_follow_keys(requests) == "")
    if not unseen.any():
        return None
    lo = int(np.asarray(requests["start_ns"], dtype=np.int64)[unseen].min())
    hi = int(np.asarray(requests["end_ns"], dtype=np.int64)[unseen].max())
    own = set(np.asarray(requests["pid"], dtype=np.int64).tolist())
    sampled = np.unique(np.asarray(run.procs["pid"], dtype=np.int64)).tolist() if "pid" in run.procs else []
    others = cores_by_process(run.procs, (lo, hi), [q for q in sampled if q not in own])
    if others is None or others.mean < ELSEWHERE_CORES:
        return None
    cores = others.mean
    busiest = []
    for q, c in sorted(others.per_process.items(), key=lambda qc: (-qc[1], -qc[0]))[:3]:
        info = run.processes.get(q)
        torch = f", torch {info.torch_version}" if info is not None and info.torch_version else ""
        busiest.append(f"pid {q}{torch}: {c:.2f} cores")
    u = int(unseen.sum())
    return (f"{u:,} of {n:,} requests ran no model forward in the process that served them and handed their work on "
            "by nothing gpusleuth follows (a queue.Queue, an asyncio.Queue, a multiprocessing queue or pipe), while "
            f"the server's other processes used {cores:.2f} cores during them ({'; '.join(busiest)}): the model most "
            "likely ran there, reached through something the hook cannot tie to a request (a socket, shared memory, "
            "a pipe of the server's own) — their wait and forward are not attributed")


# the engine its /metrics named (serving/sources/engine_metrics.py) → what answers its HTTP and schedules its requests
NATIVE_ENGINES = {"llamacpp": "llama.cpp's: its C++ server (llama-server, or a wheel such as xllamacpp that embeds "
                              "it) answers HTTP and queues requests for its slots in native threads that no Python hook "
                              "runs in"}


def native_note(run: Run) -> str | None:
    """One sentence for a server that ``gpusleuth load`` started (the run's command) and got answers from, in which the
    hook recorded no request in any process: the count per level, what answered them (the engine its ``/metrics``
    named, else the general reasons) and its processes' CPU meanwhile. None when the load had no answer, the server
    was not started by gpusleuth (``gpusleuth load URL`` alone records no server), or the hook saw requests."""
    load = run.load
    if len(run.requests) or not len(load) or not run.meta.get("command") or \
            not {"level", "status", "start_ns", "end_ns"} <= set(load.columns):
        return None
    level = np.asarray(load["level"], dtype=np.int64)
    status = np.asarray(load["status"], dtype=np.int64)
    ok = (level >= 0) & (status >= 200) & (status < 400)
    if not ok.any():
        return None
    per = []
    for k in np.unique(level[ok]).tolist():
        m = ok & (level == k)
        conc = np.asarray(load["concurrency"], dtype=np.int64)[m] if "concurrency" in load else np.zeros(1, np.int64)
        rate = np.asarray(load["rate"], dtype=np.float64)[m] if "rate" in load else np.zeros(1)
        name = f"concurrency {int(conc[0])}" if conc[0] > 0 else f"{float(rate[0]):g}/s"
        per.append(f"{name}: {int(m.sum()):,}")
    engines = sorted({s.engine for s in run.engine})
    what = NATIVE_ENGINES.get(engines[0]) if len(engines) == 1 else None
    if what is not None:
        reason = f"its /metrics are {what}"
    else:
        reason = ("what answered them is not a server the hook follows (http.server, WSGI, Flask, Starlette, uvicorn, "
                  "Ray Serve, LitServe, BentoML, transformers' continuous batching): native code such as llama.cpp's "
                  "C++ server, or a process started outside this job")
    lo = int(np.asarray(load["start_ns"], dtype=np.int64)[ok].min())
    hi = int(np.asarray(load["end_ns"], dtype=np.int64)[ok].max())
    got = cores_by_process(run.procs, (lo, hi))  # every process of the server's tree, the one derivation
    cores = f", while its processes used {got.mean:.2f} cores" if got is not None else ""
    n = int(ok.sum())
    timed = "engine_prefill_ns" in load and bool((np.asarray(load["engine_prefill_ns"], dtype=np.int64)[ok] >= 0).any())
    end = ("the hook attributes nothing in it, but the engine's own timings in its answers split each request into "
           "prefill, decode and the time outside them (the serving table's engine-clock line)" if timed else
           "their wait for a slot or a batch and their forward are not attributed")
    return (f"{n:,} of {n:,} requests the server answered ({', '.join(per)}) were seen by no Python request handler in "
            f"it{cores}: {reason} — {end}")


__all__ = ["ELSEWHERE_CORES", "NATIVE_ENGINES", "NO_KEY", "elsewhere_note", "follow_note", "forward_keys",
           "native_note", "request_follow_keys"]
