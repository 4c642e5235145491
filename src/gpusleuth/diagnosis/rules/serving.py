"""Serving rules: what a recorded server's requests wait on (issue 16; docs/serving.md, "Per-request stages").

They read ``facts.requests`` (``analysis.requests.RequestAnalysis``: the hook's per-request split into
queue / pre / infer / post, the server process's CPU, the accelerator's utilization during the requests)
and, when ``gpusleuth load`` drove the server, ``facts.load`` (its levels: throughput by concurrency). A
run without requests gets nothing from them — not even a "not evaluated" line: a training job is not a
server.

Gains are priced on the server's busy time (some request in flight), not on a training loop: the share of
that time a fix gives back, as a throughput ratio.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from gpusleuth.diagnosis.facts import EngineLevel, Facts, LoadLevel, MissLevel, RequestAnalysis
from gpusleuth.diagnosis.finding import Evidence, Finding, Gain, Missing
from gpusleuth.diagnosis.rules._common import no_gpu
from gpusleuth.diagnosis.rules.serving_capacity import BEHIND_MODERATE, PREFILL_FIX, names_a_full_replica

MIN_REQUESTS = 20  # fewer requests than this say too little about a server
MIN_ALONE = 10  # requests alone in the server (nothing else in flight) enough to know a request's own split
PRE_MODERATE = 0.30  # share of service time before the model's first forward
PRE_HIGH = 0.40  # with the server process pegged at one core (GIL-bound): the wait for the GIL spreads into every part
BUSY_CORES = 0.5  # below this the server process is mostly waiting, not computing, in its request path
FLAT_RPS = 1.3  # throughput grew less than this while concurrency grew ≥ 4×: flat
INFER_DOMINANT = 0.5
ACCEL_LOW = 0.4  # mean accelerator utilization during requests below this is low
ACCEL_NOT_FULL = 0.6
QUEUE_MODERATE = 0.3  # queue's share of the slowest 5 % requests' latency
QUEUE_HIGH = 0.5
BATCH_WAIT_MODERATE = 0.2  # a batching server's requests: their wait for a batch, share of service time
BATCH_WAIT_HIGH = 0.4
OUTSIDE_MODERATE = 0.3  # the client's latency that passed outside the server's request handling
OUTSIDE_HIGH = 0.5
OUTSIDE_GROWTH_MS = 2.0  # ... and grew by at least this much over the lightest level (not the network's round trip)
GENERATOR_BUSY = 0.5  # cores of the load generator above which the client may be part of the gap
SOURCE = "hook: per-request stages"


def _pct(x: float) -> float:
    return round(x * 100, 1)


def _gain(facts: Facts, share: float, busy_s: float, method: str) -> Gain:
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


def _scaling(facts: Facts) -> Scaling | None:
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


def _waiting_not_work(ra: RequestAnalysis) -> bool:
    """The time before the model is small whenever a request has the server to itself: what grows under
    load is waiting in front of the model (a lock around it, one model instance), not preprocessing. A
    tokenizer costs its time alone too; a lock costs nothing when nobody holds it."""
    return ra.alone_requests >= MIN_ALONE and ra.alone_shares.get("pre", 0.0) < PRE_MODERATE / 2


def _requests(facts: Facts) -> RequestAnalysis | None:
    ra = facts.requests
    return ra if ra is not None and ra.count >= MIN_REQUESTS else None


def preprocessing_in_request_path(facts: Facts) -> list[Finding] | Missing:
    ra = _requests(facts)
    if ra is None:
        return []
    pre, infer, post = (ra.shares.get(k, 0.0) for k in ("pre", "infer", "post"))
    # A request's own split, when enough ran alone: under concurrency the wait for the GIL lands in whatever
    # part a thread is in, so the share before the model swings with the host's load (the same tokenizing
    # server measured 29 %, 45 % and 58 % on three days), while alone it stays what the request's own work is.
    alone = ra.alone_shares.get("pre", 0.0) if ra.alone_requests >= MIN_ALONE else None
    own = max(pre, alone or 0.0)
    if own < PRE_MODERATE or pre < PRE_MODERATE / 2 or _waiting_not_work(ra):
        return []
    cores = ra.server_cores
    scaling = _scaling(facts)
    flat = None if scaling is None else (scaling.concurrency_ratio >= 4 and scaling.rps_ratio < FLAT_RPS)
    accel_idle = ra.gpu_busy is None or ra.gpu_busy < ACCEL_NOT_FULL
    computing = cores is not None and cores >= BUSY_CORES
    high = own >= PRE_HIGH and bool(ra.cpu_pegged) and flat is not False and accel_idle
    evidence = [
        Evidence("before the model (pre)", _pct(pre), "% of request time", SOURCE),
        Evidence("model forwards (infer)", _pct(infer), "% of request time", SOURCE),
        Evidence("after the model (post)", _pct(post), "% of request time", SOURCE),
        Evidence("pre per request, p50", round(ra.parts["pre"].p50_ms, 2), "ms", SOURCE),
    ]
    for st in ra.stages[:3]:
        evidence.append(Evidence(f"stage {st.name!r}", _pct(st.share), "% of request time", "gpusleuth.stage"))
    if cores is not None:
        evidence.append(Evidence("server process CPU", round(cores, 2), "cores (mean over the requests)",
                                 "process sampler"))
    if ra.alone_requests >= MIN_ALONE:
        evidence.append(Evidence("pre when a request was alone in the server", _pct(ra.alone_shares["pre"]),
                                 f"% of request time ({ra.alone_requests} requests)", SOURCE))
    if ra.gpu_busy is not None:
        evidence.append(Evidence("accelerator busy during requests", _pct(ra.gpu_busy), "%", "NVML"))
    if scaling is not None:
        _, _, lo, hi = scaling
        evidence.append(Evidence(f"throughput, concurrency {lo.concurrency} → {hi.concurrency}",
                                 f"{lo.rps:.1f} → {hi.rps:.1f}", "requests/s", "gpusleuth load"))
    if computing:
        why = (f"the server process ran at {cores:.2f} cores — Python work holding the GIL, so more threads "
               "or concurrency cannot speed it up" if ra.cpu_pegged else
               f"the server process used {cores:.2f} cores on it")
    elif cores is not None:
        why = (f"the server process used only {cores:.2f} cores: that time is mostly waiting (I/O, a remote "
               "call, a lock), not computing")
    else:
        why = "no CPU samples of the server process say whether that time is computing or waiting"
    tail = ""
    if flat and scaling is not None:
        tail = (f" Throughput stopped growing ({scaling.hi.rps:.1f} requests/s at concurrency "
                f"{scaling.hi.concurrency} vs {scaling.lo.rps:.1f} at {scaling.lo.concurrency}) while the "
                + ("CPU-only model" if ra.gpu_busy is None else "accelerator") + " waited.")
    alone_part = (f" — {_pct(alone)} % for a request alone in the server, its own work before any wait"
                  if alone is not None and alone > pre else "")
    summary = (f"{_pct(pre)} % of the server's request time is spent before the model's first forward "
               f"(the forwards take {_pct(infer)} %){alone_part}; {why}.{tail}")
    stage = f" (`{ra.stages[0].name}`)" if ra.stages else ""
    fix = (f"Take the preprocessing{stage} out of the request path: run it in a "
           "`concurrent.futures.ProcessPoolExecutor` (from ASGI: `await loop.run_in_executor(pool, tokenize, "
           "text)`), use the tokenizer's fast batch API (Hugging Face `tokenizers`/`use_fast=True`, "
           "`tokenizer(list_of_texts)`, which runs in Rust without the GIL), or move it into a separate "
           "preprocessing service, so the web process only waits on the forward.")
    return [Finding(
        cause="serving.preprocessing", severity="high" if high else "moderate",
        title=f"Preprocessing in the request path: {_pct(pre)} % of request time before the model"
              + (f" ({_pct(alone)} % alone)" if alone is not None and alone > pre else ""),
        summary=summary, evidence=evidence, fix=fix,
        estimated_gain=_gain(facts, pre, ra.busy_s,
                             "the pre share of the server's busy time: a server bound by one core's GIL serves "
                             "1/(1 − share) as many requests once that work runs outside it"),
        confidence="high" if high and flat else ("medium" if computing else "low"),
    )]


def under_batched(facts: Facts) -> list[Finding] | Missing:
    ra = _requests(facts)
    if ra is None:
        return []
    infer = ra.shares.get("infer", 0.0)
    if infer < INFER_DOMINANT or ra.forwards_per_request > 1.5:
        return []  # not model-bound, or a generation loop (many forwards per request): not this rule
    if ra.batching is not None and (ra.batching.size_p50 or 0) > 1:
        return []  # the server batches already (waiting_for_a_batch reads how well)
    if ra.gpu_busy is None:
        return no_gpu("serving-under-batched", facts, "serving.under_batched")
    if ra.gpu_busy >= ACCEL_NOT_FULL:
        return []
    scaling = _scaling(facts)
    rising = None if scaling is None else scaling.rps_ratio >= FLAT_RPS
    if scaling is None and ra.in_flight < 1.5:
        return []  # requests hardly overlap: nothing to batch them with
    high = bool(rising) and ra.gpu_busy < ACCEL_LOW
    peers = scaling.hi.concurrency if scaling is not None else ra.in_flight
    batch = int(min(64, max(2, 2 ** math.ceil(math.log2(max(peers, 2))))))
    rows = f"{ra.batch_p50:g}" if ra.batch_p50 is not None else "unknown"
    evidence = [
        Evidence("model forwards (infer)", _pct(infer), "% of request time", SOURCE),
        Evidence("forwards per request", round(ra.forwards_per_request, 2), "", SOURCE),
        Evidence("rows per forward, p50", rows, "", SOURCE),
        Evidence("accelerator busy during requests", _pct(ra.gpu_busy), "%", "NVML"),
        Evidence("requests in flight, mean", round(ra.in_flight, 2), "", SOURCE),
    ]
    if ra.gpu_mem_share is not None:
        evidence.append(Evidence("device memory used, peak", _pct(ra.gpu_mem_share), "%", "NVML"))
    if scaling is not None:
        evidence.append(Evidence(f"throughput, concurrency {scaling.lo.concurrency} → {scaling.hi.concurrency}",
                                 f"{scaling.lo.rps:.1f} → {scaling.hi.rps:.1f}", "requests/s", "gpusleuth load"))
    idle = 1.0 - ra.gpu_busy
    return [Finding(
        cause="serving.under_batched", severity="high" if high else "moderate",
        title=f"Under-batched: one forward per request, accelerator {_pct(ra.gpu_busy)} % busy",
        summary=(f"Forwards are {_pct(infer)} % of request time, each request runs its own forward "
                 f"({rows} rows), and the accelerator was busy only {_pct(ra.gpu_busy)} % of the time"
                 + (" while throughput kept rising with concurrency." if rising else ".")),
        evidence=evidence,
        fix=(f"Batch concurrent requests into one forward (dynamic batching): collect requests for a few "
             f"milliseconds up to a batch of {batch}, run one forward, answer each — e.g. an asyncio queue in "
             "front of the model, or a server that does it (Triton's dynamic batcher, TorchServe "
             f"`batch_size`/`max_batch_delay`, vLLM/TGI for generation). Start with max batch {batch} and a "
             "delay of about one forward's time."),
        estimated_gain=_gain(facts, infer * idle, ra.busy_s,
                             "upper bound: the forwards' share of request time times the accelerator's idle "
                             "share during requests, filled by batching"),
        confidence="medium" if high else "low",
    )]


def queueing(facts: Facts) -> list[Finding] | Missing:
    ra = _requests(facts)
    if ra is None or ra.queue_measured < MIN_REQUESTS:
        return []
    q = ra.queue_p95_share
    if q is None or q < QUEUE_MODERATE:
        return []
    # workers (or the event loop) busy with preprocessing in the request path: the queue is its consequence
    symptom = ra.shares.get("pre", 0.0) >= PRE_MODERATE
    high = q >= QUEUE_HIGH and not symptom
    queue = ra.parts["queue"]
    evidence = [
        Evidence("queue share of the slowest 5 % requests' latency", _pct(q), "%", SOURCE),
        Evidence("queue p95", round(queue.p95_ms, 2), "ms", SOURCE),
        Evidence("latency p95 (queue + service)", round(ra.latency_p95_ms, 2), "ms", SOURCE),
        Evidence("queue share of all latency", _pct(ra.shares.get("queue", 0.0)), "%", SOURCE),
        Evidence("requests with a measured queue", ra.queue_measured, f"of {ra.count}", SOURCE),
    ]
    why = (" The workers are busy with the preprocessing in the request path (see that finding): fix that first."
           if symptom else "")
    return [Finding(
        cause="serving.queueing", severity="high" if high else "moderate",
        title=f"Queueing: {_pct(q)} % of tail latency is waiting for a worker",
        summary=(f"The slowest 5 % of requests spent {_pct(q)} % of their latency queued before the server "
                 f"started them (queue p95 {queue.p95_ms:.1f} ms of a {ra.latency_p95_ms:.1f} ms p95).{why}"),
        evidence=evidence,
        fix=("Add workers for the traffic: more handler threads or processes (uvicorn/gunicorn `--workers`), "
             "replicas behind the load balancer, or an async model call that does not block the event loop; if "
             "the server batches requests, lower its maximum batch size or batching delay so requests do not "
             "wait for a full batch."),
        # a latency gain, not server time: more workers shorten the wait, they give no busy time back
        estimated_gain=Gain(step_share=q, wall_share=0.0, seconds_per_run=0.0, speedup=1.0 / (1.0 - min(q, 0.999)),
                            method="p95 latency ratio without the queue (queue share of the slowest 5 % requests' "
                                   "latency); throughput does not change"),
        confidence="medium" if high else "low",
    )]


def waiting_before_the_model(facts: Facts) -> list[Finding] | Missing:
    """Requests that spend most of their time before the model only when others are in flight wait in
    front of it — a lock around the forward, one model instance shared by the workers — inside the handler,
    where the server's own queue does not see them (the preprocessing rule stays quiet on these)."""
    ra = _requests(facts)
    if ra is None:
        return []
    pre = ra.shares.get("pre", 0.0)
    if pre < PRE_MODERATE or not _waiting_not_work(ra):
        return []
    alone = ra.alone_shares.get("pre", 0.0)
    high = pre >= QUEUE_HIGH
    evidence = [
        Evidence("before the model (pre), all requests", _pct(pre), "% of request time", SOURCE),
        Evidence("pre when a request was alone in the server", _pct(alone),
                 f"% of request time ({ra.alone_requests} requests)", SOURCE),
        Evidence("model forwards (infer)", _pct(ra.shares.get("infer", 0.0)), "% of request time", SOURCE),
        Evidence("pre p95", round(ra.parts["pre"].p95_ms, 2), "ms", SOURCE),
        Evidence("requests in flight, mean", round(ra.in_flight, 2), "", SOURCE),
    ]
    for lv in ra.levels:
        if lv.requests and lv.concurrency:
            evidence.append(Evidence(f"pre at concurrency {lv.concurrency}", _pct(lv.shares.get("pre", 0.0)),
                                     "% of request time", SOURCE))
    waited = max(pre - alone, 0.0)
    return [Finding(
        cause="serving.queueing", severity="high" if high else "moderate",
        title=f"Requests wait in front of the model: {_pct(pre)} % of request time before it, {_pct(alone)} % "
              "when alone",
        summary=(f"Under load {_pct(pre)} % of the server's request time passes before the model's first "
                 f"forward, but only {_pct(alone)} % when a request has the server to itself: the requests "
                 "are not preprocessing, they wait for one another in front of the model — a lock around the "
                 "forward, or one model instance the workers take turns on. The server's own queue does not "
                 "show it: the wait is inside the handler."),
        evidence=evidence,
        fix=("Stop serializing requests on the model: drop the lock if it only guards inference (a torch "
             "module under `torch.no_grad()`/`inference_mode()` is safe to call from several threads), run "
             "more model replicas or worker processes, or batch the waiting requests into one forward "
             "(dynamic batching) — they are already queued together."),
        estimated_gain=Gain(step_share=waited, wall_share=0.0, seconds_per_run=0.0,
                            speedup=1.0 / (1.0 - min(waited, 0.999)),
                            method="latency ratio without the wait: the pre share under load minus the pre "
                                   "share of requests alone; throughput is bound by the model either way"),
        confidence="medium",
    )]


def waiting_for_a_batch(facts: Facts) -> list[Finding] | Missing:
    """A batching server's requests (their forward ran in a batch on the batcher's thread or task, joined by
    analysis/batching.py) that spend a large share of their time between handing their work to the batcher
    and their batch's forward. Where that wait goes says which knob: work taken off the queue late (earlier
    batches still running: the model is saturated) or taken early and then held while the batcher collects
    more (its wait window, or a max batch the traffic fills slowly)."""
    ra = facts.requests
    b = ra.batching if ra is not None else None
    if ra is None or b is None or b.requests < MIN_REQUESTS or b.wait_share < BATCH_WAIT_MODERATE:
        return []
    if b.size_max is None or b.size_max <= 1:
        return []  # every forward served one request: no batch was waited for (the hand-off to the model's thread)
    w = b.wait_share
    high = w >= BATCH_WAIT_HIGH
    queued, collect = b.queued_share, b.collect_share
    size_p50: float | None = b.size_p50
    size_max: int | None = b.size_max
    # under `gpusleuth load`, the level where requests waited most says which knob (levels mix batch sizes)
    worst = max((lv for lv in ra.levels if lv.batch_forwards and lv.batch_collect_share is not None),
                key=lambda lv: lv.shares.get("wait", 0.0), default=None)
    if worst is not None:
        queued, collect = worst.batch_queued_share, worst.batch_collect_share
        size_p50, size_max = worst.batch_size_p50, worst.batch_size_max
    full = size_max is not None and size_p50 is not None and size_p50 >= b.size_max
    src = "hook: queue hand-off joined with the batcher's forwards"
    evidence = [
        Evidence("waiting for a batch", _pct(w), "% of request time", src),
        Evidence("batch wait p50 / p95", f"{b.wait_p50_ms:.1f} / {b.wait_p95_ms:.1f}", "ms", src),
        Evidence("requests per batch p50 / p90 / max", f"{b.size_p50:g} / {b.size_p90:g} / {b.size_max}",
                 f"over {b.forwards_joined:,} forwards", src),
    ]
    if queued is not None and collect is not None:
        evidence.append(Evidence("queued behind earlier batches", _pct(queued), "% of request time", src))
        evidence.append(Evidence("held while the batcher collected more", _pct(collect), "% of request time", src))
    if b.forward_p50_ms is not None:
        evidence.append(Evidence("batch forward p50", round(b.forward_p50_ms, 2), "ms", src))
    evidence.append(Evidence("a request's share of its batch forward, p50", round(b.own_p50_ms, 3), "ms", src))
    for lv in ra.levels:
        if lv.batch_forwards and lv.concurrency:
            evidence.append(Evidence(f"requests per batch at concurrency {lv.concurrency}, p50 / max",
                                     f"{lv.batch_size_p50:g} / {lv.batch_size_max}", "", src))
    # the server's configured max batch is not visible, only the largest batch it ran: whether the window
    # expired or a max batch was reached, the fix for a wait after the take is the same two knobs
    held = collect is not None and (queued is None or collect >= queued)
    if not held and names_a_full_replica(ra):
        return []  # queued behind earlier batches on a full replica: serving.too_few_replicas names it, with N
    held_ms = f" below the {b.collect_p50_ms:.1f} ms it held work here (p50)" if b.collect_p50_ms is not None else ""
    if held:
        why = (f"most of it after the batcher took the work, while it collected more: batches of {size_p50:g} "
               f"requests (p50; the largest {size_max}) each waited for the window or the batch to fill while the "
               "model had nothing to do")
        fix = ("Shorten the batcher's wait window (Triton `max_queue_delay_microseconds`, TorchServe "
               f"`max_batch_delay`, your own queue's timeout){held_ms}, "
               f"or lower the max batch size to what this traffic brings (about {size_p50:g}), so a batch starts "
               "with what is there; or collect the next batch while the model runs the current one.")
    else:
        why = ("most of it before the batcher took the work: earlier batches were still running, so the model "
               "is saturated at this load" + (f" with batches of {size_max}, the largest it ran" if full else ""))
        fix = (("If that is the max batch size, raise it (each forward serves more requests: Triton "
                "`max_batch_size`, TorchServe `batch_size`) where memory allows, or " if full else "")
               + "add model instances or replicas (Triton `instance_group` count, more workers): the requests "
               "wait for the model, not for the wait window.")
    if worst is not None:
        why += f" (at concurrency {worst.concurrency}, where requests waited most)" if worst.concurrency else \
            f" (at {worst.rate:g} requests/s, where requests waited most)"
    return [Finding(
        cause="serving.batch_wait", severity="high" if high else "moderate",
        title=f"Waiting for a batch: {_pct(w)} % of request time, batches of {size_p50:g} (p50)",
        summary=(f"{b.requests:,} requests handed their work to a batcher and waited {_pct(w)} % of their time "
                 f"for the forward that served them (p95 {b.wait_p95_ms:.1f} ms); {why}."),
        evidence=evidence, fix=fix,
        estimated_gain=Gain(step_share=w, wall_share=0.0, seconds_per_run=0.0, speedup=1.0 / (1.0 - min(w, 0.999)),
                            method="upper bound on the latency ratio without the batch wait; throughput is "
                                   "set by the batches, not by the wait"),
        confidence="medium" if high else "low",
    )]


def outside_the_server(facts: Facts) -> list[Finding] | Missing:
    """Under `gpusleuth load` with the server recorded: the client's latency against the server's own time for
    the same requests (joined on X-Request-Id, else compared by level). What grows outside the server with
    load waits before the server's handler starts a request (the listen backlog, a connection waiting for a
    worker thread or for the GIL to parse it) or after it ends it: too few worker processes, a development
    server's connection handling. Quiet when the gap stays what the lightest level shows (the network)."""
    ra = facts.requests
    if ra is None or ra.count < MIN_REQUESTS:
        return []
    levels = [lv for lv in ra.levels if lv.outside_share is not None and lv.requests >= MIN_REQUESTS // 2]
    if not levels:
        return []
    worst = max(levels, key=lambda lv: lv.outside_share or 0.0)
    base = min(levels, key=lambda lv: (lv.concurrency or 0, lv.rate))
    share = worst.outside_share or 0.0
    grew = (worst.outside_p50_ms or 0.0) - (base.outside_p50_ms or 0.0) if worst is not base else None
    if share < OUTSIDE_MODERATE or (grew is not None and grew < OUTSIDE_GROWTH_MS):
        return []
    gen = None
    for lv in facts.load.levels if facts.load is not None else []:
        if lv.level == worst.level:
            gen = lv.generator_cpu_cores
    client_busy = gen is not None and gen > GENERATOR_BUSY
    high = share >= OUTSIDE_HIGH and grew is not None and not client_busy
    src = "gpusleuth load (client) and hook (server)"
    how = (f"{worst.outside_joined:,} requests joined on X-Request-Id" if worst.outside_joined else
           "client p50 − server p50 of the level")
    name = f"concurrency {worst.concurrency}" if worst.concurrency else f"{worst.rate:g} requests/s"
    evidence = [
        Evidence(f"client latency p50 at {name}", round(worst.client_p50_ms or 0.0, 2), "ms", "gpusleuth load"),
        Evidence(f"server latency p50 at {name} (queue + service)", round(worst.server_p50_ms or 0.0, 2), "ms",
                 SOURCE),
        Evidence(f"outside the server at {name}, p50", round(worst.outside_p50_ms or 0.0, 2), "ms", how),
        Evidence(f"outside the server at {name}", _pct(share), "% of client latency", src),
    ]
    if worst is not base:
        bname = f"concurrency {base.concurrency}" if base.concurrency else f"{base.rate:g} requests/s"
        evidence.append(Evidence(f"outside the server at {bname}, p50", round(base.outside_p50_ms or 0.0, 2), "ms",
                                 how))
    if worst.server_cores is not None:
        evidence.append(Evidence(f"server CPU at {name}", round(worst.server_cores, 2), "cores", "process sampler"))
    if gen is not None:
        evidence.append(Evidence(f"load generator CPU at {name}", round(gen, 2), "cores", "gpusleuth load"))
    single = len(ra.pids) == 1 and worst.server_cores is not None
    tail = (" The load generator itself was busy, so part of the gap may be the client's own: load from another "
            "machine to tell." if client_busy else "")
    return [Finding(
        cause="serving.outside_server", severity="high" if high else "moderate",
        title=f"Time outside the server: {_pct(share)} % of client latency at {name} "
              f"(client p50 {worst.client_p50_ms:.1f} ms, server {worst.server_p50_ms:.1f} ms)",
        summary=(f"At {name} clients waited {worst.client_p50_ms:.1f} ms (p50) for answers the server spent "
                 f"{worst.server_p50_ms:.1f} ms on: {_pct(share)} % of their latency passed before the server's "
                 "handler started the request or after it ended it"
                 + (f", up from {base.outside_p50_ms:.1f} ms at the lightest level — not the network" if grew
                    is not None else "")
                 + ". That is connections waiting in the listen backlog or for a worker, or a handler thread "
                 "waiting for the GIL to read and parse the request" + (f" (one server process, {worst.server_cores:.2f} "
                 "cores: its threads share one GIL)" if single else "") + "." + tail),
        evidence=evidence,
        fix=("Serve with more worker processes rather than threads (gunicorn `-w N`, uvicorn `--workers N`, one per "
             "core) and a production server instead of a development one (Flask's `app.run`/werkzeug, "
             "`http.server`); keep connections alive on the client side; for bursts, raise the listen backlog "
             "(`listen(backlog)`, gunicorn `--backlog`, `net.core.somaxconn`). Then load again: the gap should "
             "fall back to the lightest level's."),
        estimated_gain=Gain(step_share=share, wall_share=0.0, seconds_per_run=0.0,
                            speedup=1.0 / (1.0 - min(share, 0.999)),
                            method="upper bound on the client latency ratio without the time outside the server"),
        confidence="low" if client_busy else ("medium" if high else "low"),
    )]


_MISS_FIX = {
    "outside": ("time outside the server (the listen backlog, connection handling, the client's own lateness)",
                "Serve with more worker processes (gunicorn `-w N`, uvicorn `--workers N`) and a production server, "
                "raise the listen backlog for bursts, and check the load generator is not the one falling behind."),
    "queue": ("waiting for a worker in the server's queue",
              "Add workers or replicas for this traffic, or send less of it to each replica."),
    "pre": ("work before the model (tokenization, preprocessing)",
            "Take it out of the request path: a fast (Rust) tokenizer (`use_fast=True`, `tokenizers`), a process "
            "pool, or a separate preprocessing service."),
    "wait": ("waiting for a batch",
             "Shorten the batcher's wait window or lower its max batch size (Triton `max_queue_delay_microseconds`, "
             "TorchServe `max_batch_delay`/`batch_size`)."),
    "prefill": ("the prompt's prefill (slowed or delayed by the other sequences' decode)",
                "Interleave prefill with decode in bounded chunks (vLLM `--enable-chunked-prefill` with "
                "`--max-num-batched-tokens`, SGLang `--chunked-prefill-size`), cap concurrent sequences (vLLM "
                "`--max-num-seqs`, TGI `--max-batch-size`), reuse shared prompt prefixes (prefix caching)."),
    "decode": ("decode, slowing as more sequences share the model",
               "Cap the sequences decoding together per replica (vLLM `--max-num-seqs`, TGI "
               "`--max-concurrent-requests`/`--max-batch-size`, SGLang `--max-running-requests`) and add replicas "
               "for the traffic; each token then waits on fewer others."),
    "post": ("work between and after the forwards (writing the stream, detokenizing, waiting for the GIL)",
             "Stream from a loop that does not share its thread with the model: detokenize incrementally, write "
             "asynchronously, run the model in its own process (worker processes or an engine)."),
}


def slo_misses(facts: Facts) -> list[Finding] | Missing:
    """Under `gpusleuth load --slo … -- CMD`: the level that missed its SLO worst, each missed request's
    client latency cut into parts (analysis/slo_miss.py) and held against the lightest level's, and the part
    that grew most named with its fix. Quiet when every level meets the SLO."""
    ra = facts.requests
    load = facts.load
    if ra is None or not ra.misses or load is None:
        return []
    by_level = {lv.level: lv for lv in load.levels}
    slo_of = {lv.level: lv.slo for lv in load.levels if lv.slo is not None}
    failing = [m for m in ra.misses if m.parts_ms and m.level in slo_of and not slo_of[m.level].meets]
    if not failing:
        return []
    m = max(failing, key=lambda x: (1.0 - slo_of[x.level].attainment, x.concurrency or 0, x.rate))
    attainment = slo_of[m.level].attainment
    name = f"concurrency {m.concurrency}" if m.concurrency else f"{m.rate:g} requests/s"
    base = by_level.get(m.baseline_level)
    bname = (f"concurrency {base.concurrency}" if base.concurrency else f"{base.rate:g} requests/s") if base else \
        "the lightest level"
    src = "gpusleuth load (client) joined with the hook (server) on X-Request-Id"
    total = sum(max(v, 0.0) for v in m.excess_ms.values())
    evidence = [Evidence(f"SLO attainment at {name}", _pct(attainment), "% of requests sent", "gpusleuth load"),
                Evidence("missed requests joined to the server's records", m.joined, f"of {m.missed}", src)]
    for k, v in m.missed_by.items():
        evidence.append(Evidence(f"over the {k[:-3]} budget", v, "requests", "gpusleuth load"))
    for part in sorted(m.parts_ms, key=lambda k: -m.excess_ms.get(k, 0.0)):
        if m.parts_ms[part] > 0 or m.baseline_ms.get(part, 0.0) > 0:
            evidence.append(Evidence(f"{part}, missed requests p50 (vs {bname})",
                                     f"{m.parts_ms[part]:.1f} (vs {m.baseline_ms.get(part, 0.0):.1f})", "ms", src))
    if m.decode_per_token_ms is not None and m.baseline_decode_per_token_ms:
        evidence.append(Evidence(f"decode per output token (vs {bname})",
                                 f"{m.decode_per_token_ms:.2f} (vs {m.baseline_decode_per_token_ms:.2f})", "ms", src))
    dominant = None if m.level == m.baseline_level else m.dominant
    own = dominant is None
    if dominant is None:
        title = f"SLO missed at {name} even with the server nearly to itself: the requests' own time is over budget"
        summary = (f"{m.missed:,} of {m.answered:,} answered requests at {name} missed the SLO "
                   f"(attainment {_pct(attainment)} %), and nothing grew against {bname}: their own "
                   "time — the model's forwards for their prompt and output — is over the budget.")
        fix = ("Make a request cheaper or the budget realistic: a faster device or a smaller or quantized model, "
               "fewer output tokens (`max_tokens`), shorter prompts, or a budget set from the time a request takes "
               "alone.")
        share = 0.0
    else:
        what, fix = _MISS_FIX[dominant]
        if dominant in ("queue", "wait") and (m.behind_decode_share or 0.0) >= BEHIND_MODERATE:
            # an engine that ran the others' decode while the prompt waited (serving.prefill_behind_decode)
            what = (f"waiting before their first forward, {_pct(m.behind_decode_share or 0.0)} % of their time to "
                    "first token behind the other sequences' decode steps")
            fix = PREFILL_FIX
        cap = ra.capacity
        if (dominant in ("outside", "queue", "wait") and cap is not None and cap.saturated
                and cap.offered_level == m.level and cap.replicas):
            what = f"waiting for a full replica ({_MISS_FIX[dominant][0].split(' (')[0]})"
            fix = (f"One replica is full at this load (see the too-few-replicas finding): run {cap.replicas} "
                   "replicas, or send each less traffic.")
        grew = m.excess_ms[dominant]
        share = grew / total if total > 0 else 0.0
        slowed = ""
        if dominant == "decode" and m.decode_per_token_ms and m.baseline_decode_per_token_ms:
            slowed = (f" — {m.baseline_decode_per_token_ms:.1f} → {m.decode_per_token_ms:.1f} ms per output token "
                      f"({m.decode_per_token_ms / m.baseline_decode_per_token_ms:.1f}×)")
        title = f"SLO missed at {name}: {what.split(' (')[0].split(',')[0]} grew {grew:.0f} ms per request"
        summary = (f"{m.missed:,} of {m.answered:,} answered requests at {name} missed the SLO (attainment "
                   f"{_pct(attainment)} %). Against {bname}, their time grew most in {what}: "
                   f"+{grew:.1f} ms at the p50{slowed}, {_pct(share)} % of all the growth.")
    high = not own and share >= 0.5 and m.joined >= _min_joined(m)
    others = [x for x in ra.misses if x is not m and x.parts_ms]
    if others:
        summary += " Other levels that missed: " + ", ".join(
            (f"concurrency {x.concurrency}" if x.concurrency else f"{x.rate:g}/s") + f" ({x.dominant or 'own cost'})"
            for x in others) + "."
    return [Finding(
        cause="serving.slo_miss", severity="high" if high else "moderate", title=title, summary=summary,
        evidence=evidence, fix=fix,
        estimated_gain=Gain(step_share=1.0 - attainment, wall_share=0.0, seconds_per_run=0.0, speedup=1.0,
                            method="requests that missed the SLO at that level (attainment gap); the fix's effect "
                                   "on attainment is measured by loading again"),
        confidence="medium" if high else "low",
    )]


def _min_joined(m: MissLevel) -> int:
    """Missed requests joined to the server enough to call the reason high: 20, or all of a smaller miss."""
    return min(MIN_REQUESTS, int(m.missed))


ENGINE_WAITING = 1.0  # requests waiting inside the engine for a slot, mean over a level's scrapes
KV_FULL = 0.95  # KV-cache usage, max over a level
KV_PRESSED = 0.9


def engine_capacity(facts: Facts) -> list[Finding] | Missing:
    """An LLM engine's own /metrics during `gpusleuth load` (analysis/engine.py): requests waiting inside the
    engine for a slot, a KV cache that fills, sequences preempted to make room. Quiet when the engine ran
    every request it was sent, with room left."""
    ea = facts.engine
    if ea is None or not ea.levels:
        return []

    def pressure(lv: EngineLevel) -> tuple[bool, bool, float]:
        return ((lv.preemptions or 0.0) > 0, (lv.kv_usage_max or 0.0) >= KV_FULL, lv.waiting_mean or 0.0)

    lv = max(ea.levels, key=pressure)
    preempted = (lv.preemptions or 0.0) > 0
    kv_full = (lv.kv_usage_max or 0.0) >= KV_FULL
    waiting = (lv.waiting_mean or 0.0) >= ENGINE_WAITING
    if not (preempted or kv_full or waiting):
        return []
    name = f"concurrency {lv.concurrency}" if lv.concurrency else f"{lv.rate:g} requests/s"
    src = f"{ea.engine} /metrics"
    evidence = [Evidence(f"engine scrapes at {name}", lv.scrapes, "", src)]
    for label, mean, mx, unit in (("running requests", lv.running_mean, lv.running_max, ""),
                                  ("waiting requests", lv.waiting_mean, lv.waiting_max, "")):
        if mean is not None:
            evidence.append(Evidence(f"{label}, mean / max", f"{mean:.1f} / {mx:.0f}", unit, src))
    if lv.kv_usage_mean is not None:
        evidence.append(Evidence("KV-cache usage, mean / max", f"{_pct(lv.kv_usage_mean)} / {_pct(lv.kv_usage_max or 0)}",
                                 "%", src))
    if lv.preemptions is not None:
        evidence.append(Evidence("preemptions during the level", int(lv.preemptions), "", src))
    for key, label in (("queue", "the engine's queue time p50"), ("ttft", "the engine's TTFT p50")):
        if key in lv.p50_ms:
            evidence.append(Evidence(label, round(lv.p50_ms[key], 1), f"ms ({lv.observations[key]} requests)", src))
    if lv.client_ttft_p50_ms is not None:
        evidence.append(Evidence("the client's TTFT p50", round(lv.client_ttft_p50_ms, 1), "ms", "gpusleuth load"))
    high = preempted and (lv.kv_usage_max or 0.0) >= KV_PRESSED
    if preempted or kv_full:
        title = (f"KV cache full at {name}: " + (f"{int(lv.preemptions or 0)} preemptions" if preempted else
                                                 f"usage {_pct(lv.kv_usage_max or 0)} %"))
        summary = (f"At {name} {ea.engine}'s KV cache reached {_pct(lv.kv_usage_max or 0)} %"
                   + (f" and it preempted {int(lv.preemptions or 0)} running sequences to make room (each one "
                      "recomputes or swaps its prompt later)" if preempted else "")
                   + (f"; {lv.waiting_mean:.1f} requests waited for a slot on average" if waiting else "") + ".")
        fix = ("Give the KV cache room or ask less of it: fewer sequences at once (vLLM `--max-num-seqs`, SGLang "
               "`--max-running-requests`), a larger share of device memory (vLLM `--gpu-memory-utilization`, "
               "SGLang `--mem-fraction-static`), a shorter `--max-model-len`, an fp8 KV cache (`--kv-cache-dtype "
               "fp8`), or more replicas / tensor parallelism for this traffic.")
    else:
        title = f"Requests wait inside the engine at {name}: {lv.waiting_mean:.1f} waiting on average"
        summary = (f"At {name} {ea.engine} ran {lv.running_mean or 0:.1f} requests on average while "
                   f"{lv.waiting_mean:.1f} waited for a slot, with the KV cache "
                   + (f"at most {_pct(lv.kv_usage_max)} % full" if lv.kv_usage_max is not None else "usage unknown")
                   + ": its cap on running sequences, not memory, held them back.")
        fix = ("Raise the engine's running-sequence cap where the KV cache has room (vLLM `--max-num-seqs`, SGLang "
               "`--max-running-requests`, TGI `--max-batch-total-tokens`, llama.cpp `--parallel`), or add replicas "
               "for this traffic.")
    return [Finding(
        cause="serving.engine_capacity", severity="high" if high else "moderate", title=title, summary=summary,
        evidence=evidence, fix=fix,
        estimated_gain=Gain(step_share=0.0, wall_share=0.0, seconds_per_run=0.0, speedup=1.0,
                            method="not predicted: measure the fix by loading again at the same level"),
        confidence="medium" if high else "low",
    )]
