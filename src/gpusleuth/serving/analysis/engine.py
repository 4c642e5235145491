"""What an LLM engine said about itself during each load level: ``analyze_engine(run, load) -> EngineAnalysis``.

Reads ``run.engine`` (its ``/metrics`` scraped once a second while ``gpusleuth load`` ran; sources/
engine_metrics.py) and the load's levels. Per level: the engine's running and waiting requests and KV-cache
usage (mean and max over the scrapes inside the level), the preemptions it made and the tokens it
processed (its counters' growth over the level), and its own histograms' p50 over the requests it finished
in the level (bucket counts at the level's end minus those at its start: TTFT, queue, prefill, decode,
time per output token). Where the engine counts its decode steps and the seconds it spent generating
(llama.cpp), also its mean batch — busy slots per decode step over the level — and its own time per output
token; where it counts its prefix cache (llama.cpp, vLLM, SGLang), the share of the level's prompt tokens it
answered from that cache (a level measured on cached prompts measures the cache, not the prefill). Joined with the client's own numbers for the same level: the client's TTFT p50
against the engine's — what passed outside the engine (the HTTP front end, tokenization, the network).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from gpusleuth.serving.analysis.load import LoadAnalysis
from gpusleuth.run.model import Run
from gpusleuth.serving.run.engine_samples import EngineSample, histogram_quantile

LATE_NS = 300_000_000  # a scrape this soon after a level's end still belongs to it (requests finishing last)


@dataclass
class EngineLevel:
    level: int
    concurrency: int
    rate: float
    scrapes: int
    running_mean: float | None = None
    running_max: float | None = None
    waiting_mean: float | None = None
    waiting_max: float | None = None
    kv_usage_mean: float | None = None
    kv_usage_max: float | None = None
    preemptions: float | None = None  # growth of the counter over the level
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    batch_mean: float | None = None  # busy slots per decode step over the level (llama.cpp)
    decode_ms_per_token: float | None = None  # the engine's generating time over the tokens it generated
    # the share of the level's prompt tokens the engine answered from its prefix cache (llama.cpp: cached ÷
    # (cached + computed); vLLM V1: hits ÷ queries; a hit-rate gauge's mean over the level otherwise)
    cached_prompt_share: float | None = None
    p50_ms: dict[str, float] = field(default_factory=dict)  # the engine's histograms over the level
    observations: dict[str, int] = field(default_factory=dict)
    client_ttft_p50_ms: float | None = None  # gpusleuth load's own, for the same level


@dataclass
class EngineAnalysis:
    engine: str
    scrapes: int
    levels: list[EngineLevel]

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "scrapes": self.scrapes, "levels": [asdict(lv) for lv in self.levels]}


def _stat(samples: list[EngineSample], key: str) -> tuple[float | None, float | None]:
    v = [s.values[key] for s in samples if key in s.values]
    return (float(np.mean(v)), float(np.max(v))) if v else (None, None)


def _growth(a: EngineSample | None, b: EngineSample | None, key: str) -> float | None:
    if a is None or b is None or key not in a.values or key not in b.values:
        return None
    return max(b.values[key] - a.values[key], 0.0)  # a restarted engine resets its counters


def _batch_mean(a: EngineSample | None, b: EngineSample | None) -> float | None:
    """Busy slots per decode step between two scrapes: llama.cpp gives the mean since start and the steps
    since start, whose product is the busy slots summed over its steps."""
    if a is None or b is None:
        return None
    steps = _growth(a, b, "decode_steps")
    if not steps or "busy_slots_per_decode" not in a.values or "busy_slots_per_decode" not in b.values:
        return None
    busy = (b.values["busy_slots_per_decode"] * b.values["decode_steps"]
            - a.values["busy_slots_per_decode"] * a.values["decode_steps"])
    return max(busy, 0.0) / steps


def _cached_share(a: EngineSample | None, b: EngineSample | None, inside: list[EngineSample]) -> float | None:
    """The share of a level's prompt tokens the engine's prefix cache served, from its counters' growth where it
    counts both sides (llama.cpp counts computed and cached prompt tokens apart; vLLM V1 the tokens it looked up
    and found), else the mean of its hit-rate gauge inside the level; None when it says nothing about a cache or
    took no prompt in the level."""
    hits, queries = _growth(a, b, "prefix_cache_hits"), _growth(a, b, "prefix_cache_queries")
    if hits is not None and queries:
        return min(hits / queries, 1.0)
    cached, computed = _growth(a, b, "prompt_tokens_cached"), _growth(a, b, "prompt_tokens")
    if cached is not None and computed is not None and cached + computed > 0:
        return cached / (cached + computed)
    return _stat(inside, "prefix_hit_rate")[0]


def analyze_engine(run: Run, load: LoadAnalysis | None) -> EngineAnalysis | None:
    samples: list[EngineSample] = list(run.engine or [])
    if not samples:
        return None
    levels = load.levels if load is not None else []
    out = []
    for i, lv in enumerate(levels):
        lo, hi = int(lv.start_ns), int(lv.end_ns)
        # a scrape soon after the level's end still belongs to it, but not once the next level has begun (levels
        # are 0.2 s apart: a scrape 0.25 s after this level's end holds the next level's first answers)
        late = min(hi + LATE_NS, int(levels[i + 1].start_ns)) if i + 1 < len(levels) else hi + LATE_NS
        inside = [s for s in samples if lo <= s.t_ns <= hi]
        before = [s for s in samples if s.t_ns <= lo]
        after = [s for s in samples if s.t_ns <= max(late, hi)]
        a = before[-1] if before else (inside[0] if inside else None)
        b = after[-1] if after else None
        el = EngineLevel(level=lv.level, concurrency=lv.concurrency, rate=lv.rate, scrapes=len(inside))
        el.running_mean, el.running_max = _stat(inside, "running")
        el.waiting_mean, el.waiting_max = _stat(inside, "waiting")
        el.kv_usage_mean, el.kv_usage_max = _stat(inside, "kv_usage")
        el.preemptions = _growth(a, b, "preemptions")
        span = (b.t_ns - a.t_ns) / 1e9 if a is not None and b is not None and b.t_ns > a.t_ns else None
        for key, attr in (("prompt_tokens", "prompt_tokens_per_s"), ("generation_tokens", "generation_tokens_per_s")):
            g = _growth(a, b, key)
            setattr(el, attr, g / span if g is not None and span else None)
        el.batch_mean = _batch_mean(a, b)
        gen, secs = _growth(a, b, "generation_tokens"), _growth(a, b, "decode_seconds")
        el.decode_ms_per_token = secs / gen * 1e3 if gen and secs is not None else None
        el.cached_prompt_share = _cached_share(a, b, inside)
        if a is not None and b is not None and a is not b:
            for name, hb in b.hists.items():
                ha = a.hists.get(name)
                counts = list(hb.counts)
                if ha is not None and ha.bounds == hb.bounds:
                    counts = [max(x - y, 0.0) for x, y in zip(hb.counts, ha.counts)]
                n = counts[-1] if counts else 0.0
                q = histogram_quantile(hb.bounds, counts, 0.5)
                if n > 0 and q is not None:
                    el.p50_ms[name] = q * 1e3
                    el.observations[name] = int(n)
        tokens = getattr(lv, "tokens", None)
        ttft = getattr(tokens, "ttft_ms", None) if tokens is not None else None
        el.client_ttft_p50_ms = ttft.p50 if ttft is not None else None
        out.append(el)
    return EngineAnalysis(engine=samples[0].engine, scrapes=len(samples), levels=out)


__all__ = ["EngineAnalysis", "EngineLevel", "analyze_engine"]
