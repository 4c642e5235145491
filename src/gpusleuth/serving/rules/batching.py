"""Serving rules on how a server batches its model's work: not at all while the accelerator idles
(``under_batched``), requests waiting for a batch to form or to run (``waiting_for_a_batch``), and an LLM
engine whose continuous batch is full — requests waiting inside it for a slot, a KV cache that fills, sequences
preempted (``engine_capacity``; issue 16, docs/serving.md "Batching servers" and "LLM servers").

They read ``facts.requests`` (``RequestAnalysis`` with its ``BatchStats``: the forwards ``serving/analysis/batching.py``
joined to each request), ``facts.load`` and ``facts.engine`` (the engine's own /metrics per level). Gains are
priced like the other serving rules (``serving/rules/_common.py``).
"""

from __future__ import annotations

import math

from gpusleuth.diagnosis.facts import EngineLevel, Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Gain, Missing
from gpusleuth.diagnosis.rules._common import no_gpu
from gpusleuth.serving.rules._common import (ACCEL_NOT_FULL, FLAT_RPS, MIN_REQUESTS, SOURCE, busy_gain,
                                                       enough_requests, load_scaling, pct)
from gpusleuth.serving.rules.capacity import names_a_full_replica
from gpusleuth.serving.rules.knobs import knobs_for

INFER_DOMINANT = 0.5
ACCEL_LOW = 0.4  # mean accelerator utilization during requests below this is low
BATCH_WAIT_MODERATE = 0.2  # a batching server's requests: their wait for a batch, share of service time
BATCH_WAIT_HIGH = 0.4


def under_batched(facts: Facts) -> list[Finding] | Missing:
    ra = enough_requests(facts)
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
    scaling = load_scaling(facts)
    rising = None if scaling is None else scaling.rps_ratio >= FLAT_RPS
    if scaling is None and ra.in_flight < 1.5:
        return []  # requests hardly overlap: nothing to batch them with
    high = bool(rising) and ra.gpu_busy < ACCEL_LOW
    peers = scaling.hi.concurrency if scaling is not None else ra.in_flight
    batch = int(min(64, max(2, 2 ** math.ceil(math.log2(max(peers, 2))))))
    rows = f"{ra.batch_p50:g}" if ra.batch_p50 is not None else "unknown"
    evidence = [
        Evidence("model forwards (infer)", pct(infer), "% of request time", SOURCE),
        Evidence("forwards per request", round(ra.forwards_per_request, 2), "", SOURCE),
        Evidence("rows per forward, p50", rows, "", SOURCE),
        Evidence("accelerator busy during requests", pct(ra.gpu_busy), "%", "NVML"),
        Evidence("requests in flight, mean", round(ra.in_flight, 2), "", SOURCE),
    ]
    if ra.gpu_mem_share is not None:
        evidence.append(Evidence("device memory used, peak", pct(ra.gpu_mem_share), "%", "NVML"))
    if scaling is not None:
        evidence.append(Evidence(f"throughput, concurrency {scaling.lo.concurrency} → {scaling.hi.concurrency}",
                                 f"{scaling.lo.rps:.1f} → {scaling.hi.rps:.1f}", "requests/s", "gpusleuth load"))
    idle = 1.0 - ra.gpu_busy
    k = knobs_for(ra.framework)
    how = (f"in {k.framework}, {k.turn_on}." if k is not None else
           "e.g. an asyncio queue in front of the model, or a server that does it (Triton's dynamic batcher, "
           "TorchServe `batch_size`/`max_batch_delay`, vLLM/TGI for generation).")
    return [Finding(
        cause="serving.under_batched", severity="high" if high else "moderate",
        title=f"Under-batched: one forward per request, accelerator {pct(ra.gpu_busy)} % busy",
        summary=(f"Forwards are {pct(infer)} % of request time, each request runs its own forward "
                 f"({rows} rows), and the accelerator was busy only {pct(ra.gpu_busy)} % of the time"
                 + (" while throughput kept rising with concurrency." if rising else ".")),
        evidence=evidence,
        fix=(f"Batch concurrent requests into one forward (dynamic batching): collect requests for a few "
             f"milliseconds up to a batch of {batch}, run one forward, answer each — {how} "
             f"Start with max batch {batch} and a delay of about one forward's time."),
        estimated_gain=busy_gain(facts, infer * idle, ra.busy_s,
                             "upper bound: the forwards' share of request time times the accelerator's idle "
                             "share during requests, filled by batching"),
        confidence="medium" if high else "low",
    )]


def waiting_for_a_batch(facts: Facts) -> list[Finding] | Missing:
    """A batching server's requests (their forward ran in a batch on the batcher's thread or task, joined by
    serving/analysis/batching.py) that spend a large share of their time between handing their work to the batcher
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
        Evidence("waiting for a batch", pct(w), "% of request time", src),
        Evidence("batch wait p50 / p95", f"{b.wait_p50_ms:.1f} / {b.wait_p95_ms:.1f}", "ms", src),
        Evidence("requests per batch p50 / p90 / max", f"{b.size_p50:g} / {b.size_p90:g} / {b.size_max}",
                 f"over {b.forwards_joined:,} forwards", src),
    ]
    if queued is not None and collect is not None:
        evidence.append(Evidence("queued behind earlier batches", pct(queued), "% of request time", src))
        evidence.append(Evidence("held while the batcher collected more", pct(collect), "% of request time", src))
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
        k = knobs_for(ra.framework)
        if k is not None:
            fix = (f"Shorten the batcher's wait window ({k.framework}: {k.wait_window}){held_ms}, or lower "
                   f"{k.max_batch} to what this traffic brings (about {size_p50:g}), so a batch starts with what is "
                   "there" + (f"; or collect the next batch while the model runs the current one ({k.overlap})."
                              if k.overlap else "."))
        else:
            fix = ("Shorten the batcher's wait window (Triton `max_queue_delay_microseconds`, TorchServe "
                   f"`max_batch_delay`, your own queue's timeout){held_ms}, "
                   f"or lower the max batch size to what this traffic brings (about {size_p50:g}), so a batch "
                   "starts with what is there; or collect the next batch while the model runs the current one.")
    else:
        why = ("most of it before the batcher took the work: earlier batches were still running, so the model "
               "is saturated at this load" + (f" with batches of {size_max}, the largest it ran" if full else ""))
        k = knobs_for(ra.framework)
        max_batch = (f"{k.framework}: {k.max_batch}" if k is not None else
                     "Triton `max_batch_size`, TorchServe `batch_size`")
        replicas = f"{k.framework}: {k.replicas}" if k is not None else "Triton `instance_group` count, more workers"
        fix = ((f"If that is the max batch size, raise it (each forward serves more requests: {max_batch}) where "
                "memory allows, or " if full else "")
               + f"add model instances or replicas ({replicas}): the requests wait for the model, not for the wait "
               "window.")
    if worst is not None:
        why += f" (at concurrency {worst.concurrency}, where requests waited most)" if worst.concurrency else \
            f" (at {worst.rate:g} requests/s, where requests waited most)"
    return [Finding(
        cause="serving.batch_wait", severity="high" if high else "moderate",
        title=f"Waiting for a batch: {pct(w)} % of request time, batches of {size_p50:g} (p50)",
        summary=(f"{b.requests:,} requests handed their work to a batcher and waited {pct(w)} % of their time "
                 f"for the forward that served them (p95 {b.wait_p95_ms:.1f} ms); {why}."),
        evidence=evidence, fix=fix,
        estimated_gain=Gain(step_share=w, wall_share=0.0, seconds_per_run=0.0, speedup=1.0 / (1.0 - min(w, 0.999)),
                            method="upper bound on the latency ratio without the batch wait; throughput is "
                                   "set by the batches, not by the wait"),
        confidence="medium" if high else "low",
    )]


ENGINE_WAITING = 1.0  # requests waiting inside the engine for a slot, mean over a level's scrapes
KV_FULL = 0.95  # KV-cache usage, max over a level
KV_PRESSED = 0.9


DECODE_GROWTH = 2.0  # decode time per token at the pressured level ÷ the lightest level's: compute shared
TOKENS_FLAT = 1.5  # ... while generated tokens/s grew less than this: more sequences, not more tokens


def compute_bound(levels: list[EngineLevel], lv: EngineLevel) -> tuple[EngineLevel, float] | None:
    """(the lightest level, the growth of decode time per token) when the engine is compute-bound at ``lv``:
    its per-token decode time grew ≥ 2× from the lightest level while its generated tokens/s grew < 1.5× —
    llama.cpp on CPU went 0.9 → 6.5 ms a token from concurrency 1 to 4, where raising `--parallel` was advised."""
    timed = [x for x in levels if x.decode_ms_per_token and x.generation_tokens_per_s]
    if lv not in timed or len(timed) < 2:
        return None
    base = min(timed, key=lambda x: (x.concurrency or 0, x.rate))
    if base is lv or not base.decode_ms_per_token:
        return None
    grew = (lv.decode_ms_per_token or 0.0) / base.decode_ms_per_token
    tokens = (lv.generation_tokens_per_s or 0.0) / (base.generation_tokens_per_s or 1.0)
    return (base, grew) if grew >= DECODE_GROWTH and tokens < TOKENS_FLAT else None


def engine_capacity(facts: Facts) -> list[Finding] | Missing:
    """An LLM engine's own /metrics during `gpusleuth load` (serving/analysis/engine.py): requests waiting inside the
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
        evidence.append(Evidence("KV-cache usage, mean / max", f"{pct(lv.kv_usage_mean)} / {pct(lv.kv_usage_max or 0)}",
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
                                                 f"usage {pct(lv.kv_usage_max or 0)} %"))
        summary = (f"At {name} {ea.engine}'s KV cache reached {pct(lv.kv_usage_max or 0)} %"
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
                   + (f"at most {pct(lv.kv_usage_max)} % full" if lv.kv_usage_max is not None else "usage unknown"))
        bound = compute_bound(ea.levels, lv)
        if bound is not None:
            base, grew = bound
            summary += (f". It is compute-bound: its decode time per token grew from {base.decode_ms_per_token:.1f} "
                        f"ms at the lightest level to {lv.decode_ms_per_token:.1f} ms here (×{grew:.1f}) while its "
                        f"generated tokens/s went from {base.generation_tokens_per_s or 0:.0f} to "
                        f"{lv.generation_tokens_per_s or 0:.0f}: sequences running together share the same compute.")
            evidence.append(Evidence(f"decode time per token at {name}", round(lv.decode_ms_per_token or 0.0, 2),
                                     f"ms (×{grew:.1f} the lightest level's)", src))
            fix = ("Add replicas (or a faster device, a smaller or quantized model) for this traffic. Raising the "
                   "running-sequence cap (llama.cpp `--parallel`, vLLM `--max-num-seqs`, SGLang "
                   "`--max-running-requests`) would let more sequences share the same compute, each slower: "
                   "the engine generates no more tokens per second.")
        else:
            summary += ": its cap on running sequences, not memory, held them back."
            fix = ("Raise the engine's running-sequence cap where the KV cache has room (vLLM `--max-num-seqs`, "
                   "SGLang `--max-running-requests`, TGI `--max-batch-total-tokens`, llama.cpp `--parallel`), or "
                   "add replicas for this traffic.")
    return [Finding(
        cause="serving.engine_capacity", severity="high" if high else "moderate", title=title, summary=summary,
        evidence=evidence, fix=fix,
        estimated_gain=Gain(step_share=0.0, wall_share=0.0, seconds_per_run=0.0, speedup=1.0,
                            method="not predicted: measure the fix by loading again at the same level"),
        confidence="medium" if high else "low",
    )]
