"""Serving causes that need more than one part of a request's time (issue 26 item 5; docs/serving.md):

* ``prefill_behind_decode`` — a continuous-batching engine ran the other sequences' decode steps while a new
  prompt waited: the missed requests' time to first token is their wait behind those steps
  (``serving/analysis/slo_miss.py`` counts them from the forwards ``serving/analysis/batching.py`` joined to each request);
* ``too_few_replicas`` — one replica is full: throughput flat across levels while the wait grows, the model
  working nearly all the time, nothing inside the server holding the requests (``serving/analysis/capacity.py``),
  with the arithmetic of the replicas needed.

Rules here read ``facts.requests`` (``RequestAnalysis``) and ``facts.load`` only, like the one-part serving
rules (``serving/rules/request_path.py``, ``serving/rules/batching.py``); kept apart so those stay short.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts, RequestAnalysis
from gpusleuth.diagnosis.finding import Evidence, Finding, Gain, Missing
from gpusleuth.serving.rules.knobs import knobs_for

BEHIND_MODERATE = 0.2  # share of the missed requests' TTFT spent behind others' decode steps
BEHIND_HIGH = 0.4
MIN_GREW = 5  # missed requests whose TTFT grew, joined to the engine's forwards, to say anything
MIN_GREW_HIGH = 20  # ... to call it high (or all of a smaller miss)
SRC_JOIN = "hook: queue hand-off joined with the engine's forwards"


def _pct(x: float) -> float:
    return round(x * 100, 1)


def _name(concurrency: int, rate: float) -> str:
    return f"concurrency {concurrency}" if concurrency else f"{rate:g} requests/s"


PREFILL_FIX = (
    "Let a new prompt into the running batch at the next step instead of after the others' decode: chunked "
    "prefill, which mixes a bounded slice of the prompt into each decode step. vLLM: `--enable-chunked-prefill` "
    "(always on in the V1 engine) with a `--max-num-batched-tokens` large enough for the decodes plus a prompt "
    "chunk, and `--max-num-seqs` so new sequences find a slot; SGLang: `--chunked-prefill-size` and "
    "`--max-running-requests`; TGI: a lower `--max-waiting-tokens` (decode steps run before waiting requests are "
    "forced into the batch) and `--waiting-served-ratio`, with `--max-batch-prefill-tokens` sized for the "
    "prompts; `transformers serve --continuous-batching`: `--cb-max-batch-tokens` (its per-step token budget, "
    "which prompts are split to fit). Then load again: the wait behind decode steps should fall to under one "
    "step.")


def prefill_behind_decode(facts: Facts) -> list[Finding] | Missing:
    """Under `gpusleuth load --slo … -- CMD` on an engine whose forwards run outside the requests: the level
    whose missed requests spent the largest share of their time to first token waiting behind other
    sequences' decode-only steps (after their request was queued, before their own first forward). Severity
    by that share. Quiet when the engine takes a new prompt at its next step (chunked prefill), on servers
    whose forwards run inside each request, and when nothing missed."""
    ra = facts.requests
    if ra is None or not ra.misses:
        return []
    cands = [m for m in ra.misses if m.behind_decode_share is not None and m.ttft_grew >= MIN_GREW]
    if not cands:
        return []
    m = max(cands, key=lambda x: x.behind_decode_share or 0.0)
    share = m.behind_decode_share or 0.0
    if share < BEHIND_MODERATE:
        return []
    high = share >= BEHIND_HIGH and m.ttft_grew >= min(MIN_GREW_HIGH, m.missed)
    name = _name(m.concurrency, m.rate)
    base = next((x for x in getattr(getattr(facts, "load", None), "levels", None) or [] if x.level == m.baseline_level),
                None)
    bname = _name(base.concurrency, base.rate) if base is not None else "the lightest level"
    b = ra.batching
    step = b.forward_p50_ms if b is not None else None
    evidence = [
        Evidence(f"missed requests at {name} whose TTFT grew past {bname}'s p90 ({m.baseline_ttft_p90_ms or 0:.1f} ms)",
                 m.ttft_grew, f"of {m.missed} missed", "gpusleuth load (client) joined on X-Request-Id"),
        Evidence("their TTFT p50", round(m.ttft_p50_ms or 0.0, 1), "ms", "gpusleuth load"),
        Evidence("waiting behind other sequences' decode steps, p50", round(m.behind_decode_p50_ms or 0.0, 1),
                 f"ms ({m.behind_steps_p50 or 0:g} steps)", SRC_JOIN),
        Evidence("share of their TTFT", _pct(share), "%", SRC_JOIN),
    ]
    if step is not None:
        evidence.append(Evidence("an engine step, p50", round(step, 2), "ms", SRC_JOIN))
    title = (f"Prefill delayed by others' decode at {name}: {_pct(share)} % of the missed requests' time to first "
             "token")
    summary = (f"{m.ttft_grew:,} of the {m.missed:,} requests that missed the SLO at {name} had their time to first "
               f"token grow past {bname}'s ({m.ttft_p50_ms or 0:.1f} ms p50), and {_pct(share)} % of it passed "
               f"after the engine had their request and before it ran their prompt, while it ran "
               f"{m.behind_steps_p50 or 0:g} decode-only steps of the other sequences (p50, "
               f"{m.behind_decode_p50_ms or 0:.1f} ms): the engine schedules the running sequences' decode first "
               "and admits new prompts only between them.")
    return [Finding(
        cause="serving.prefill_behind_decode", severity="high" if high else "moderate", title=title,
        summary=summary, evidence=evidence, fix=PREFILL_FIX,
        estimated_gain=Gain(step_share=share, wall_share=0.0, seconds_per_run=0.0,
                            speedup=1.0 / (1.0 - min(share, 0.999)),
                            method="upper bound on the missed requests' TTFT ratio without the wait behind other "
                                   "sequences' decode steps; the running sequences' inter-token gaps grow by the "
                                   "prompt chunks mixed into their steps"),
        confidence="medium" if high else "low",
    )]


def names_a_full_replica(ra: RequestAnalysis | None) -> bool:
    """Whether ``too_few_replicas`` speaks for this server: one replica full and N ≥ 2 needed. The batch-wait
    rule asks it too, so a batcher's requests queued behind earlier batches on a full replica are named once,
    with the replica count, not a second time as a batch wait with the same "add replicas" fix."""
    cap = ra.capacity if ra is not None else None
    if cap is None or not cap.saturated or cap.replicas is None or cap.replicas < 2:
        return False
    levels = {c.level for c in cap.levels}
    return cap.reference_level in levels and cap.per_replica_level in levels and cap.offered_level in levels


def too_few_replicas(facts: Facts) -> list[Finding] | Missing:
    """Under `gpusleuth load -- CMD`: one replica is full (serving/analysis/capacity.py) — throughput flat or falling
    across levels while the requests' wait grew, the model working nearly all the time, nothing inside the
    server (a batch window, preprocessing) holding them — and the heavier load needs N replicas by the
    measured capacity of one within the SLO (or the p95 budget, or the knee of throughput)."""
    ra = facts.requests
    cap = ra.capacity if ra is not None else None
    if cap is None or cap.replicas is None or not names_a_full_replica(ra):
        return []
    by = {c.level: c for c in cap.levels}
    heavy = by[cap.offered_level]
    ref = by.get(cap.reference_level) if cap.reference_level is not None else None
    per = by.get(cap.per_replica_level) if cap.per_replica_level is not None else None
    if ref is None or per is None:
        return []
    hname, rname, pname = (_name(c.concurrency, c.rate) for c in (heavy, ref, per))
    within = {"the SLO": "within the SLO", "the p95 budget": "within the p95 budget",
              "throughput": "at the knee of throughput (no latency target given)"}[cap.target]
    src = "gpusleuth load and the hook"
    rate = per.goodput_rps if per.goodput_rps is not None else per.rps
    tokens = per.goodput_tokens_per_s if per.goodput_tokens_per_s is not None else per.tokens_per_s
    cap_text = f"{rate:.1f} requests/s" + (f", {tokens:.0f} output tokens/s" if tokens else "")
    if cap.offered_concurrency is not None:
        arithmetic = (f"one replica served {pname} {within} ({cap_text}); {hname} needs "
                      f"⌈{heavy.concurrency} ÷ {per.concurrency}⌉ = {cap.replicas} replicas")
    else:
        arithmetic = (f"one replica served {cap_text} {within} (at {pname}); {hname} needs "
                      f"⌈{heavy.rate:g} ÷ {rate:.1f}⌉ = {cap.replicas} replicas")
    evidence = [
        Evidence(f"throughput at {rname} → {hname}", f"{ref.rps:.1f} → {heavy.rps:.1f}", "requests/s", "gpusleuth load"),
        Evidence(f"waiting before any work at {hname}, p50 (queue, batch or engine slot, outside the server)",
                 round(heavy.waiting_p50_ms or 0.0, 1), f"ms (+{cap.waiting_growth_ms or 0:.1f} over the lightest level)",
                 src),
        Evidence(f"client latency p50 at {hname}", round(heavy.latency_p50_ms or 0.0, 1), "ms", "gpusleuth load"),
        Evidence(f"model working at {hname}", _pct(heavy.model_busy or 0.0), "% of the level's time", "hook"),
        Evidence(f"one replica's capacity {within}", cap_text, f"at {pname}", "gpusleuth load"),
        Evidence("replicas needed", cap.replicas, f"for {hname}", "gpusleuth load"),
    ]
    if heavy.batch_p50 is not None:
        evidence.append(Evidence(f"requests per forward at {hname}, p50", f"{heavy.batch_p50:g}", "", "hook"))
    b = ra.batching if ra is not None else None
    if b is not None and b.queued_share is not None:  # the batch-wait rule leaves this wait to this finding
        evidence.append(Evidence("waiting for a batch, queued behind earlier batches", _pct(b.queued_share),
                                 "% of request time (all levels)", "hook: queue hand-off joined with the forwards"))
    load = getattr(facts, "load", None)
    lv = next((x for x in getattr(load, "levels", None) or [] if x.level == heavy.level), None)
    missed = lv is not None and lv.slo is not None and not lv.slo.meets
    high = missed or cap.target != "throughput"
    batched = heavy.batch_p50 is not None and heavy.batch_p50 > 1
    nxt = by.get(cap.next_level) if cap.next_level is not None else None
    bound = (f" One replica's capacity lies between {pname} and {_name(nxt.concurrency, nxt.rate)}, which missed "
             f"{cap.target}: load between them to narrow the count, which is an upper bound by that step."
             if nxt is not None else "")
    served = (f"no more than at {rname} ({ref.rps:.1f})" if cap.offered_concurrency is not None else
              f"short of the {heavy.rate:g} asked")
    summary = (f"At {hname} the server answered {heavy.rps:.1f} requests/s, {served}, while the requests' wait "
               f"before any work grew to {heavy.waiting_p50_ms or 0:.1f} ms "
               f"(p50) and the model worked {_pct(heavy.model_busy or 0.0)} % of the time: one replica is full. "
               f"Nothing inside it holds the requests (no batch window, no preprocessing in front of the model). "
               f"By the measured capacity, {arithmetic}.{bound}")
    k = knobs_for(ra.framework if ra is not None else None)
    fix = (f"Run {cap.replicas} replicas " + (f"({k.framework}: {k.replicas}) " if k is not None else "")
           + f"behind the load balancer for this load (or a card with about "
           f"{cap.replicas}× the throughput), and route by queue length or in-flight requests so no replica "
           "queues while another idles. "
           + ("Before that, check the engine's cap on sequences batched together is what memory allows (vLLM "
              "`--max-num-seqs`, SGLang `--max-running-requests`, TGI `--max-batch-size`): batches stayed at "
              f"{heavy.batch_p50:g}, and a larger batch helps only while the device has compute to spare."
              if batched else
              "If the device has compute to spare at one request per forward, batching requests (dynamic or "
              "continuous batching) raises one replica's capacity first."))
    return [Finding(
        cause="serving.too_few_replicas", severity="high" if high else "moderate",
        title=f"Too few replicas: one is full at {hname} (answered {heavy.rps:.1f} requests/s); {cap.replicas} needed",
        summary=summary, evidence=evidence, fix=fix,
        # not a speedup of this replica: N of them, N times the hardware (and its cost), serve N times its capacity
        estimated_gain=Gain(step_share=0.0, wall_share=0.0, seconds_per_run=0.0, speedup=1.0,
                            method=f"no replica gets faster: {cap.replicas} replicas serve {cap.replicas}× one "
                                   f"replica's capacity {within}, at {cap.replicas}× its cost; measure by loading "
                                   "them at the same level"),
        confidence="medium" if high else "low",
    )]


__all__ = ["prefill_behind_decode", "too_few_replicas"]
