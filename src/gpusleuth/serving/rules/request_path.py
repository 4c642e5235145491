"""Serving rules on a request's path through the server: what a recorded server's requests wait on before and
around the model (issue 16; docs/serving.md, "Per-request stages") — preprocessing in the request path, queueing
for a worker, waiting in front of the model (a lock, one shared instance), and time the client waits outside the
server's handler.

They read ``facts.requests`` (``serving.analysis.request_model.RequestAnalysis``: the hook's per-request split into
queue / pre / infer / post, the server process's CPU, the accelerator's utilization during the requests)
and, when ``gpusleuth load`` drove the server, ``facts.load`` (its levels: throughput by concurrency). A
run without requests gets nothing from them — not even a "not evaluated" line: a training job is not a
server. How a server batches is ``serving/rules/batching.py``; why requests missed an SLO ``serving/rules/slo.py``.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts, RequestAnalysis
from gpusleuth.diagnosis.finding import Evidence, Finding, Gain, Missing
from gpusleuth.serving.rules._common import (ACCEL_NOT_FULL, FLAT_RPS, MIN_REQUESTS, SOURCE, busy_gain,
                                                       enough_requests, load_scaling, pct)

MIN_ALONE = 10  # requests alone in the server (nothing else in flight) enough to know a request's own split
PRE_MODERATE = 0.30  # share of service time before the model's first forward
PRE_HIGH = 0.40  # with the server process pegged at one core (GIL-bound): the wait for the GIL spreads into every part
BUSY_CORES = 0.5  # below this the server process is mostly waiting, not computing, in its request path
QUEUE_MODERATE = 0.3  # the queue's part of the p95 latency (1 − p95 without the queue / p95)
QUEUE_HIGH = 0.5
OUTSIDE_MODERATE = 0.3  # the client's latency that passed outside the server's request handling
OUTSIDE_HIGH = 0.5
OUTSIDE_GROWTH_MS = 2.0  # ... and grew by at least this much over the lightest level (not the network's round trip)
GENERATOR_BUSY = 0.5  # cores of the load generator above which the client may be part of the gap


def _waiting_not_work(ra: RequestAnalysis) -> bool:
    """The time before the model is small whenever a request has the server to itself: what grows under
    load is waiting in front of the model (a lock around it, one model instance), not preprocessing. A
    tokenizer costs its time alone too; a lock costs nothing when nobody holds it."""
    return ra.alone_requests >= MIN_ALONE and ra.alone_shares.get("pre", 0.0) < PRE_MODERATE / 2


def preprocessing_in_request_path(facts: Facts) -> list[Finding] | Missing:
    ra = enough_requests(facts)
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
    scaling = load_scaling(facts)
    flat = None if scaling is None else (scaling.concurrency_ratio >= 4 and scaling.rps_ratio < FLAT_RPS)
    accel_idle = ra.gpu_busy is None or ra.gpu_busy < ACCEL_NOT_FULL
    computing = cores is not None and cores >= BUSY_CORES
    high = own >= PRE_HIGH and bool(ra.cpu_pegged) and flat is not False and accel_idle
    evidence = [
        Evidence("before the model (pre)", pct(pre), "% of request time", SOURCE),
        Evidence("model forwards (infer)", pct(infer), "% of request time", SOURCE),
        Evidence("after the model (post)", pct(post), "% of request time", SOURCE),
        Evidence("pre per request, p50", round(ra.parts["pre"].p50_ms, 2), "ms", SOURCE),
    ]
    for st in ra.stages[:3]:
        evidence.append(Evidence(f"stage {st.name!r}", pct(st.share), "% of request time", "gpusleuth.stage"))
    if cores is not None:
        evidence.append(Evidence("server process CPU", round(cores, 2), "cores (mean over the requests)",
                                 "process sampler"))
    if ra.alone_requests >= MIN_ALONE:
        evidence.append(Evidence("pre when a request was alone in the server", pct(ra.alone_shares["pre"]),
                                 f"% of request time ({ra.alone_requests} requests)", SOURCE))
    if ra.gpu_busy is not None:
        evidence.append(Evidence("accelerator busy during requests", pct(ra.gpu_busy), "%", "NVML"))
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
    alone_part = (f" — {pct(alone)} % for a request alone in the server, its own work before any wait"
                  if alone is not None and alone > pre else "")
    summary = (f"{pct(pre)} % of the server's request time is spent before the model's first forward "
               f"(the forwards take {pct(infer)} %){alone_part}; {why}.{tail}")
    stage = f" (`{ra.stages[0].name}`)" if ra.stages else ""
    fix = (f"Take the preprocessing{stage} out of the request path: run it in a "
           "`concurrent.futures.ProcessPoolExecutor` (from ASGI: `await loop.run_in_executor(pool, tokenize, "
           "text)`), use the tokenizer's fast batch API (Hugging Face `tokenizers`/`use_fast=True`, "
           "`tokenizer(list_of_texts)`, which runs in Rust without the GIL), or move it into a separate "
           "preprocessing service, so the web process only waits on the forward.")
    return [Finding(
        cause="serving.preprocessing", severity="high" if high else "moderate",
        title=f"Preprocessing in the request path: {pct(pre)} % of request time before the model"
              + (f" ({pct(alone)} % alone)" if alone is not None and alone > pre else ""),
        summary=summary, evidence=evidence, fix=fix,
        estimated_gain=busy_gain(facts, pre, ra.busy_s,
                             "the pre share of the server's busy time: a server bound by one core's GIL serves "
                             "1/(1 − share) as many requests once that work runs outside it"),
        confidence="high" if high and flat else ("medium" if computing else "low"),
    )]


def queueing(facts: Facts) -> list[Finding] | Missing:
    ra = enough_requests(facts)
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
        Evidence("queue's part of the p95 latency", pct(q), "%", SOURCE),
        Evidence("latency p95 without the queue", round(ra.latency_p95_ms * (1.0 - q), 2), "ms", SOURCE),
        Evidence("queue p95", round(queue.p95_ms, 2), "ms", SOURCE),
        Evidence("latency p95 (queue + service)", round(ra.latency_p95_ms, 2), "ms", SOURCE),
        Evidence("queue share of all latency", pct(ra.shares.get("queue", 0.0)), "%", SOURCE),
        Evidence("requests with a measured queue", ra.queue_measured, f"of {ra.count}", SOURCE),
    ]
    why = (" The workers are busy with the preprocessing in the request path (see that finding): fix that first."
           if symptom else "")
    return [Finding(
        cause="serving.queueing", severity="high" if high else "moderate",
        title=f"Queueing: {pct(q)} % of tail latency is waiting for a worker",
        summary=(f"Waiting before the server started them makes {pct(q)} % of the requests' p95 latency: "
                 f"{ra.latency_p95_ms:.1f} ms with the queue, {ra.latency_p95_ms * (1.0 - q):.1f} ms without it "
                 f"(queue p95 {queue.p95_ms:.1f} ms).{why}"),
        evidence=evidence,
        fix=("Add workers for the traffic: more handler threads or processes (uvicorn/gunicorn `--workers`), "
             "replicas behind the load balancer, or an async model call that does not block the event loop; if "
             "the server batches requests, lower its maximum batch size or batching delay so requests do not "
             "wait for a full batch."),
        # a latency gain, not server time: more workers shorten the wait, they give no busy time back
        estimated_gain=Gain(step_share=q, wall_share=0.0, seconds_per_run=0.0, speedup=1.0 / (1.0 - min(q, 0.999)),
                            method="p95 latency ratio without the queue (the p95 of each request's latency less "
                                   "its queue); throughput does not change"),
        confidence="medium" if high else "low",
    )]


def waiting_before_the_model(facts: Facts) -> list[Finding] | Missing:
    """Requests that spend most of their time before the model only when others are in flight wait in
    front of it — a lock around the forward, one model instance shared by the workers — inside the handler,
    where the server's own queue does not see them (the preprocessing rule stays quiet on these)."""
    ra = enough_requests(facts)
    if ra is None:
        return []
    pre = ra.shares.get("pre", 0.0)
    if pre < PRE_MODERATE or not _waiting_not_work(ra):
        return []
    if ra.batching is not None or any(lv.batch_forwards for lv in ra.levels):
        # the server batches (its forwards run outside the requests): the wait before the model is its batch
        # collection or hand-off, which the batching rules price — not a lock, and "batch them" is what it does
        # already (Ray's @serve.batch read "a lock around the forward … dynamic batching")
        return []
    alone = ra.alone_shares.get("pre", 0.0)
    high = pre >= QUEUE_HIGH
    evidence = [
        Evidence("before the model (pre), all requests", pct(pre), "% of request time", SOURCE),
        Evidence("pre when a request was alone in the server", pct(alone),
                 f"% of request time ({ra.alone_requests} requests)", SOURCE),
        Evidence("model forwards (infer)", pct(ra.shares.get("infer", 0.0)), "% of request time", SOURCE),
        Evidence("pre p95", round(ra.parts["pre"].p95_ms, 2), "ms", SOURCE),
        Evidence("requests in flight, mean", round(ra.in_flight, 2), "", SOURCE),
    ]
    for lv in ra.levels:
        if lv.requests and lv.concurrency:
            evidence.append(Evidence(f"pre at concurrency {lv.concurrency}", pct(lv.shares.get("pre", 0.0)),
                                     "% of request time", SOURCE))
    waited = max(pre - alone, 0.0)
    return [Finding(
        cause="serving.queueing", severity="high" if high else "moderate",
        title=f"Requests wait in front of the model: {pct(pre)} % of request time before it, {pct(alone)} % "
              "when alone",
        summary=(f"Under load {pct(pre)} % of the server's request time passes before the model's first "
                 f"forward, but only {pct(alone)} % when a request has the server to itself: the requests "
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
        Evidence(f"outside the server at {name}", pct(share), "% of client latency", src),
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
        title=f"Time outside the server: {pct(share)} % of client latency at {name} "
              f"(client p50 {worst.client_p50_ms:.1f} ms, server {worst.server_p50_ms:.1f} ms)",
        summary=(f"At {name} clients waited {worst.client_p50_ms:.1f} ms (p50) for answers the server spent "
                 f"{worst.server_p50_ms:.1f} ms on: {pct(share)} % of their latency passed before the server's "
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
