"""Why requests missed their SLO under ``gpusleuth load --slo`` (issue 26; docs/serving.md): the level that
missed worst, each missed request's client latency cut into parts (``serving/analysis/slo_miss.py``) and held against the
lightest level's, and the part that grew most named with its fix. It reads every part of a request's time, so
it sits beside the one-part rules (``serving_request_path``, ``serving_batching``) rather than in them.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts, MissLevel
from gpusleuth.diagnosis.finding import Evidence, Finding, Gain, Missing
from gpusleuth.serving.rules._common import MIN_REQUESTS, pct
from gpusleuth.serving.rules.capacity import BEHIND_MODERATE, PREFILL_FIX
from gpusleuth.serving.rules.knobs import knobs_for


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
    client latency cut into parts (serving/analysis/slo_miss.py) and held against the lightest level's, and the part
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
    evidence = [Evidence(f"SLO attainment at {name}", pct(attainment), "% of requests sent", "gpusleuth load"),
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
                   f"(attainment {pct(attainment)} %), and nothing grew against {bname}: their own "
                   "time — the model's forwards for their prompt and output — is over the budget.")
        fix = ("Make a request cheaper or the budget realistic: a faster device or a smaller or quantized model, "
               "fewer output tokens (`max_tokens`), shorter prompts, or a budget set from the time a request takes "
               "alone.")
        share = 0.0
    else:
        what, fix = _MISS_FIX[dominant]
        knobs = knobs_for(ra.framework)
        if dominant == "wait" and knobs is not None:  # the framework's own batch knobs, not Triton's
            fix = (f"Shorten the batcher's wait window or lower its max batch size ({knobs.framework}: "
                   f"{knobs.wait_window}, {knobs.max_batch}).")
        if dominant in ("queue", "wait") and (m.behind_decode_share or 0.0) >= BEHIND_MODERATE:
            # an engine that ran the others' decode while the prompt waited (serving.prefill_behind_decode)
            what = (f"waiting before their first forward, {pct(m.behind_decode_share or 0.0)} % of their time to "
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
                   f"{pct(attainment)} %). Against {bname}, their time grew most in {what}: "
                   f"+{grew:.1f} ms at the p50{slowed}, {pct(share)} % of all the growth.")
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
