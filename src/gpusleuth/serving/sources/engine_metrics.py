"""LLM engines' own ``/metrics`` (vLLM, SGLang, TGI, llama.cpp's server) → ``EngineSample`` per scrape.

An engine knows what no client or hook outside it can: how many sequences it runs and how many wait for a
slot, how full its KV cache is, how often it preempted a sequence to make room, and its own histograms of
time to first token, queueing, prefill and decode. ``gpusleuth load`` reads the endpoint while it loads
(``serving/recorder/engine_scrape.py`` keeps only the engines' lines, with the time of each scrape, in
``engine_metrics.jsonl``); this module parses each scrape with prometheus-client's parser and maps each
engine's names onto one vocabulary:

| signal | vLLM | SGLang | TGI | llama.cpp |
|---|---|---|---|---|
| running | `vllm:num_requests_running` | `sglang:num_running_reqs` | `tgi_batch_current_size` | `llamacpp:requests_processing` |
| waiting | `vllm:num_requests_waiting` | `sglang:num_queue_reqs` | `tgi_queue_size` | `llamacpp:requests_deferred` |
| kv_usage (0..1) | `vllm:kv_cache_usage_perc`, older `vllm:gpu_cache_usage_perc` | `sglang:token_usage` | — | `llamacpp:kv_cache_usage_ratio` (some builds) |
| preemptions (counter) | `vllm:num_preemptions_total` | — | — | — |
| prompt_tokens, generation_tokens (counters) | `vllm:prompt_tokens_total`, `vllm:generation_tokens_total` | `sglang:prompt_tokens_total`, `sglang:generation_tokens_total` | — | `llamacpp:prompt_tokens_total`, `llamacpp:tokens_predicted_total` |
| prompt_tokens_cached (counter) | — | — | — | `llamacpp:prompt_tokens_cached_total` |
| prefix_cache_queries, prefix_cache_hits (counters, prompt tokens) | `vllm:prefix_cache_queries_total`, `vllm:prefix_cache_hits_total` (V1) | — | — | — |
| prefix_hit_rate (0..1) | older `vllm:gpu_prefix_cache_hit_rate` | `sglang:cache_hit_rate` | — | — |
| decode_steps (counter), busy_slots_per_decode (its running mean) | — | — | — | `llamacpp:n_decode_total`, `llamacpp:n_busy_slots_per_decode` |
| prefill_seconds, decode_seconds (counters) | — | — | — | `llamacpp:prompt_seconds_total`, `llamacpp:tokens_predicted_seconds_total` |
| histograms (s): ttft, e2e, queue, prefill, decode, tpot | `vllm:time_to_first_token_seconds`, `vllm:e2e_request_latency_seconds`, `vllm:request_queue_time_seconds`, `vllm:request_prefill_time_seconds`, `vllm:request_decode_time_seconds`, `vllm:time_per_output_token_seconds` | `sglang:time_to_first_token_seconds`, `sglang:e2e_request_latency_seconds`, —, —, —, `sglang:time_per_output_token_seconds` | —, `tgi_request_duration`, `tgi_request_queue_duration`, —, —, `tgi_request_mean_time_per_token_duration` | — |

Series that differ only in a tensor/pipeline/expert-parallel rank label (SGLang labels every rank) are the
same requests counted once per rank: the largest is kept; other label sets (vLLM's ``engine``, data-parallel
replicas) are added up — KV usage and a prefix-cache hit rate are their mean.

llama.cpp's names are those of its live server (``--metrics`` of the server xllamacpp 2026.10.11549 embeds,
captured under load in tests/fixtures/engine_metrics/llamacpp_live.metrics), where they differ from its README:
``llamacpp:kv_cache_usage_ratio`` is gone (no KV usage then), ``llamacpp:prompt_tokens_total`` counts only the
prompt tokens it computed — those its prompt cache served are ``llamacpp:prompt_tokens_cached_total`` — and
its counters grow when a request *ends* (tokens, seconds), its gauges are read between two decode steps.
``n_busy_slots_per_decode`` is a mean since start over ``n_decode_total`` steps: their product is the busy
slots summed over steps, so two scrapes give the mean batch between them (serving/analysis/engine.py).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from gpusleuth.serving.run.engine_samples import EngineSample, Histogram
from gpusleuth.run.layout import ENGINE_METRICS_FILE

ENGINE_PREFIXES = {"vllm:": "vllm", "sglang:": "sglang", "tgi_": "tgi", "llamacpp:": "llamacpp"}
RANK_LABELS = frozenset(("tp_rank", "pp_rank", "moe_ep_rank", "le"))

GAUGES: dict[str, tuple[str, ...]] = {
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size",
                "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size", "llamacpp:requests_deferred"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
                 "llamacpp:kv_cache_usage_ratio"),
    "busy_slots_per_decode": ("llamacpp:n_busy_slots_per_decode",),
    "prefix_hit_rate": ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"),  # 0..1, vLLM V0 and SGLang
}
COUNTERS: dict[str, tuple[str, ...]] = {
    "preemptions": ("vllm:num_preemptions_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total", "llamacpp:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total",
                          "llamacpp:tokens_predicted_total"),
    "prompt_tokens_cached": ("llamacpp:prompt_tokens_cached_total",),
    # vLLM V1's prefix cache, in prompt tokens: asked for, found in the cache
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total",),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total",),
    "decode_steps": ("llamacpp:n_decode_total",),
    "prefill_seconds": ("llamacpp:prompt_seconds_total",),
    "decode_seconds": ("llamacpp:tokens_predicted_seconds_total",),
}
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "e2e": ("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds", "tgi_request_duration"),
    "queue": ("vllm:request_queue_time_seconds", "tgi_request_queue_duration"),
    "prefill": ("vllm:request_prefill_time_seconds",),
    "decode": ("vllm:request_decode_time_seconds",),
    "tpot": ("vllm:time_per_output_token_seconds", "vllm:inter_token_latency_seconds",
             "sglang:time_per_output_token_seconds", "tgi_request_mean_time_per_token_duration"),
}


def detect_engine(text: str) -> str | None:
    """The engine whose metric names the text carries (the first sample line's prefix), else None."""
    for line in text.splitlines():
        if line and not line.startswith("#"):
            for prefix, engine in ENGINE_PREFIXES.items():
                if line.startswith(prefix):
                    return engine
    return None


SeriesKey = tuple[tuple[str, str], ...]


def _series_key(labels: dict[str, str]) -> SeriesKey:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in RANK_LABELS))


def parse_engine_metrics(text: str, t_ns: int) -> EngineSample | None:
    """One scrape → its engine's signals; None when no engine's names are in it. Raises ValueError on text
    that is not the Prometheus exposition format."""
    engine = detect_engine(text)
    if engine is None:
        return None
    # imported here: prometheus_client pulls in http.server, wsgiref and email (about 50 ms of CPU) for every
    # run directory read, and only a run of `gpusleuth load` against an LLM engine has scrapes to parse
    from prometheus_client.parser import text_string_to_metric_families

    wanted = {n for names in (*GAUGES.values(), *COUNTERS.values()) for n in names}
    hist_names = {n for names in HISTOGRAMS.values() for n in names}
    # sample name → series key → value (the largest over rank-only differences)
    flat: dict[str, dict[SeriesKey, float]] = defaultdict(dict)
    # histogram → series key → {"bounds": {le: count}, "sum": x, "count": n}
    hist: dict[str, dict[SeriesKey, dict[str, Any]]] = defaultdict(dict)
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name, labels, value = s.name, dict(s.labels), float(s.value)
            if name in wanted:
                key = _series_key(labels)
                flat[name][key] = max(flat[name].get(key, value), value)
                continue
            base = fam.name
            if base not in hist_names:
                continue
            key = _series_key(labels)
            h = hist[base].setdefault(key, {"bounds": {}, "sum": None, "count": 0.0})
            if name.endswith("_bucket") and "le" in labels:
                le = float(labels["le"])
                h["bounds"][le] = max(h["bounds"].get(le, value), value)
            elif name.endswith("_sum"):
                h["sum"] = value if h["sum"] is None else max(h["sum"], value)
            elif name.endswith("_count"):
                h["count"] = max(h["count"], value)
    out = EngineSample(t_ns=t_ns, engine=engine)
    for table, mean in ((GAUGES, ("kv_usage", "prefix_hit_rate")), (COUNTERS, ())):
        for signal, names in table.items():
            for n in names:
                if n in flat and flat[n]:
                    vals = list(flat[n].values())
                    out.values[signal] = sum(vals) / len(vals) if signal in mean else sum(vals)
                    break
    for signal, names in HISTOGRAMS.items():
        for n in names:
            if n in hist and hist[n]:
                out.hists[signal] = _merged(list(hist[n].values()))
                break
    return out


def read_engine_scrapes(run_dir: str | Path) -> tuple[list[EngineSample], str | None]:
    """``engine_metrics.jsonl`` of a run directory → its samples in time order, and a sentence for the
    scrapes that could not be read (damaged lines are skipped, the rest kept)."""
    import json

    path = Path(run_dir) / ENGINE_METRICS_FILE
    if not path.is_file():
        return [], None
    out: list[EngineSample] = []
    bad = 0
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        return [], f"{path.name}: unreadable ({exc.strerror or exc}); the engine's metrics are not in this report"
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            t_ns, text = int(rec["t_ns"]), str(rec["text"])
            sample = parse_engine_metrics(text, t_ns)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            bad += 1
            continue
        if sample is not None:
            out.append(sample)
    out.sort(key=lambda x: x.t_ns)
    loss = f"{path.name}: {bad} unreadable scrape(s) skipped" if bad else None
    return out, loss


def _merged(series: list[dict[str, Any]]) -> Histogram:
    bounds = sorted({b for s in series for b in s["bounds"]})
    counts = [sum(s["bounds"].get(b, 0.0) for s in series) for b in bounds]
    sums = [s["sum"] for s in series if s["sum"] is not None]
    count = sum(s["count"] for s in series) or (counts[-1] if counts else 0.0)
    return Histogram(bounds=bounds, counts=counts, sum=sum(sums) if sums else None, count=count)


__all__ = ["COUNTERS", "ENGINE_PREFIXES", "GAUGES", "HISTOGRAMS", "detect_engine", "parse_engine_metrics",
           "read_engine_scrapes"]
