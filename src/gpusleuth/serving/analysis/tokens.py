"""Per-level streaming numbers of an LLM load (TTFT, inter-token gaps, TPOT, tokens/s) and SLO goodput.

Why its own module: ``serving/analysis/load.py`` reads what every HTTP load has (answers, latency, the knee); what
only an OpenAI-compatible load has — token event times, token counts, budgets per request — is read here,
from the same rows, once, into typed objects the report shows as they are.

Definitions (per request, from ``load.parquet``; docs/serving.md):

* **TTFT** = first token event − start (the scheduled start in open loop, so a late generator does not hide
  queueing); a non-streaming answer's TTFT is its end-to-end time.
* **inter-token latency (ITL)**: every gap between consecutive token events of a request; the level's
  percentiles are over all gaps of all its answered requests.
* **TPOT** (time per output token after the first) = (end − first token) / (output tokens − 1), for
  requests with at least 2 output tokens.
* **end-to-end** = end − start.
* **output tokens/s** = output tokens of the level's answered requests ÷ the level's span.

**SLO**: a request *meets* it when it was answered (2xx, a usable answer) and every budget given holds:
TTFT ≤ ``ttft_ms``, its own mean inter-token gap (its TPOT) ≤ ``itl_ms``, end-to-end ≤ ``e2e_ms``.
**Attainment** = requests meeting it ÷ requests sent (dropped and failed ones count as missing it);
**goodput** = requests meeting it per second of the span, and their output tokens per second. A level
*meets the SLO* when its attainment is at least ``attainment`` (default 0.9).

**The engine's own clock** (:class:`EngineClock`), where its answers carry one (llama.cpp's ``timings``): each
request's prefill and decode as the engine timed its compute, and the rest of the client's end-to-end time —
waiting for a slot, the HTTP exchange, the engine's scheduling between steps — as ``outside``. It is what a
native engine, whose threads no Python hook sees, says of where a request's time went; the cached share is the
prompt tokens it took from its prefix cache over the prompt tokens of the requests that said.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SLO_KEYS = ("ttft_ms", "itl_ms", "e2e_ms")
DEFAULT_ATTAINMENT = 0.9


@dataclass
class Spread:
    """p50 / p90 / p99 (ms), how many values they are over, and p10 / p25 / p75 for the HTML's box per level."""

    p50: float
    p90: float
    p99: float
    n: int
    p10: float = 0.0
    p25: float = 0.0
    p75: float = 0.0

    @classmethod
    def of(cls, values_ms: np.ndarray) -> "Spread | None":
        if not len(values_ms):
            return None
        p10, p25, p50, p75, p90, p99 = (float(v) for v in np.percentile(values_ms, [10, 25, 50, 75, 90, 99]))
        return cls(p50, p90, p99, int(len(values_ms)), p10, p25, p75)


@dataclass
class TokenStats:
    """An LLM level's streaming numbers over its answered requests."""

    ttft_ms: Spread | None
    itl_ms: Spread | None
    tpot_ms: Spread | None
    e2e_ms: Spread | None
    output_tokens_per_s: float
    input_tokens_mean: float | None  # from the server's usage (None when it gave none)
    output_tokens_mean: float | None
    tokens_from: str  # "usage" (the server said), "stream" (counted token events), "mixed", "" unknown
    output_tokens: int = 0  # summed over the answered requests (those whose count is known)
    input_tokens: int | None = None  # summed, from the server's usage (None when it gave none)
    engine: EngineClock | None = None  # the engine's own per-request clock, where its answers carried one
    # prompt tokens the engine took from its cache ÷ the prompt tokens of the requests that said (usage's
    # cached_tokens, llama.cpp's cache_n); None where none said
    cached_share: float | None = None


@dataclass
class EngineClock:
    """A level's requests as the engine timed them (``engine_prefill_ns``/``engine_decode_ns`` of load.parquet)."""

    requests: int  # answered requests whose answer carried the engine's timings
    prefill_ms: Spread  # the engine's prompt processing per request
    decode_ms: Spread  # its decode per request
    outside_ms: Spread  # end-to-end − prefill − decode: a slot's wait, HTTP, scheduling between steps
    outside_share: float  # Σ outside ÷ Σ end-to-end over those requests
    over_e2e: int  # requests whose engine time exceeded the client's end-to-end by more than 1 ms (clock doubt)


@dataclass
class SloLevel:
    """One level against the SLO."""

    met: int  # requests meeting every budget
    attainment: float  # met / requests sent
    goodput_rps: float
    goodput_tokens_per_s: float
    meets: bool  # attainment >= the SLO's attainment target
    missed_by: dict[str, int]  # answered requests over each budget (a request can miss several)


def level_tokens(ld: dict[str, np.ndarray], m: np.ndarray, ok: np.ndarray, span_s: float) -> TokenStats:
    """``ld``: the load table's columns; ``m``: the level's rows; ``ok``: its answered rows (within m)."""
    start, end = ld["start_ns"][ok].astype(np.int64), ld["end_ns"][ok].astype(np.int64)
    first = ld["first_token_ns"][ok].astype(np.int64)
    has_first = first > 0
    ttft = np.where(has_first, first - start, end - start) / 1e6
    gaps = [np.diff(np.asarray(t, dtype=np.int64)) for t in ld["token_ns"][ok]]
    itl = np.concatenate(gaps) / 1e6 if gaps else np.zeros(0)
    out = ld["output_tokens"][ok].astype(np.int64)
    inp = ld["input_tokens"][ok].astype(np.int64)
    two = has_first & (out >= 2)
    tpot = (end[two] - first[two]) / (out[two] - 1) / 1e6
    known = out >= 0
    src = {str(s) for s in ld["tokens_from"][ok] if s}
    cached_share = None
    if "cached_tokens" in ld:
        cached = ld["cached_tokens"][ok].astype(np.int64)
        said = (cached >= 0) & (inp > 0)
        if said.any():
            cached_share = float(cached[said].sum()) / float(inp[said].sum())
    return TokenStats(
        ttft_ms=Spread.of(ttft), itl_ms=Spread.of(itl), tpot_ms=Spread.of(tpot), e2e_ms=Spread.of((end - start) / 1e6),
        output_tokens_per_s=float(out[known].sum()) / span_s if span_s > 0 else 0.0,
        input_tokens_mean=float(inp[inp >= 0].mean()) if (inp >= 0).any() else None,
        output_tokens_mean=float(out[known].mean()) if known.any() else None,
        tokens_from=src.pop() if len(src) == 1 else ("mixed" if src else ""),
        output_tokens=int(out[known].sum()), input_tokens=int(inp[inp >= 0].sum()) if (inp >= 0).any() else None,
        engine=_engine_clock(ld, ok, end - start), cached_share=cached_share)


def _spread(values_ms: np.ndarray) -> Spread:
    got = Spread.of(values_ms)
    assert got is not None, "called with at least one value"
    return got


OVER_E2E_NS = 1_000_000  # the engine's time may exceed the client's by its own rounding and clock, not by more


def _engine_clock(ld: dict[str, np.ndarray], ok: np.ndarray, e2e_ns: np.ndarray) -> EngineClock | None:
    if "engine_prefill_ns" not in ld or "engine_decode_ns" not in ld:
        return None
    pre, dec = ld["engine_prefill_ns"][ok].astype(np.int64), ld["engine_decode_ns"][ok].astype(np.int64)
    has = (pre >= 0) & (dec >= 0)
    if not has.any():
        return None
    pre, dec, e2e = pre[has], dec[has], e2e_ns[has].astype(np.int64)
    outside = np.maximum(e2e - pre - dec, 0)
    total = float(e2e.sum())
    return EngineClock(requests=int(has.sum()), prefill_ms=_spread(pre / 1e6), decode_ms=_spread(dec / 1e6),
                       outside_ms=_spread(outside / 1e6), outside_share=float(outside.sum()) / total if total else 0.0,
                       over_e2e=int((pre + dec - e2e > OVER_E2E_NS).sum()))


def request_verdicts(ld: dict[str, np.ndarray], ok: np.ndarray,
                     slo: dict[str, float]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Each answered request (``ok``'s rows, in order) against the SLO: (meets every budget, {budget: over
    it}) — the one verdict the level's attainment and the explanation of each miss (serving/analysis/slo_miss.py)
    both read."""
    start, end = ld["start_ns"][ok].astype(np.int64), ld["end_ns"][ok].astype(np.int64)
    first = ld["first_token_ns"][ok].astype(np.int64)
    out = ld["output_tokens"][ok].astype(np.int64)
    ttft = np.where(first > 0, first - start, end - start) / 1e6
    two = (first > 0) & (out >= 2)
    itl = np.zeros(len(start))
    itl[two] = (end[two] - first[two]) / np.maximum(out[two] - 1, 1) / 1e6
    good = np.ones(len(start), dtype=bool)
    over_by: dict[str, np.ndarray] = {}
    for key, values in (("ttft_ms", ttft), ("itl_ms", itl), ("e2e_ms", (end - start) / 1e6)):
        budget = slo.get(key)
        if budget is None:
            continue
        over_by[key] = values > budget
        good &= ~over_by[key]
    return good, over_by


def level_slo(ld: dict[str, np.ndarray], m: np.ndarray, ok: np.ndarray, span_s: float,
              slo: dict[str, float]) -> SloLevel:
    out = ld["output_tokens"][ok].astype(np.int64)
    good, over_by = request_verdicts(ld, ok, slo)
    missed = {k: int(v.sum()) for k, v in over_by.items()}
    sent = int(m.sum())
    met = int(good.sum())
    attain = met / sent if sent else 0.0
    tokens = float(out[good & (out >= 0)].sum())
    return SloLevel(met=met, attainment=attain, goodput_rps=met / span_s if span_s > 0 else 0.0,
                    goodput_tokens_per_s=tokens / span_s if span_s > 0 else 0.0,
                    meets=attain >= slo.get("attainment", DEFAULT_ATTAINMENT), missed_by=missed)


def parse_slo(text: str) -> dict[str, float]:
    """``ttft=200ms,itl=50ms,e2e=2s[,attainment=95%]`` → ``{"ttft_ms": 200, …, "attainment": 0.95}``;
    ``ValueError`` with a sentence. A bare number is milliseconds."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip().lower(), value.strip().lower()
        if not sep or not value:
            raise ValueError(f"--slo wants NAME=VALUE pairs (ttft=200ms,itl=50ms,e2e=2s), got {part!r}")
        if key in ("attainment", "attain"):
            frac = _number(value.rstrip("%"), part) / (100 if value.endswith("%") or _number(value.rstrip("%"), part) > 1 else 1)
            if not 0 < frac <= 1:
                raise ValueError(f"--slo attainment must be in (0, 100 %], got {value!r}")
            out["attainment"] = frac
            continue
        if key == "tpot":
            key = "itl"
        if key not in ("ttft", "itl", "e2e"):
            raise ValueError(f"--slo knows ttft, itl (or tpot), e2e and attainment, not {key!r}")
        scale = 1.0
        for unit, factor in (("ms", 1.0), ("us", 1e-3), ("µs", 1e-3), ("s", 1e3)):
            if value.endswith(unit):
                value, scale = value[: -len(unit)], factor
                break
        ms = _number(value, part) * scale
        if not 0 < ms < 1e9:
            raise ValueError(f"--slo {key} must be a positive time, got {part!r}")
        out[f"{key}_ms"] = ms
    if not any(k in out for k in SLO_KEYS):
        raise ValueError("--slo names no budget (ttft=…, itl=…, e2e=…)")
    return out


def _number(text: str, part: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"--slo: {part!r} is not a number with a unit (ms, s, us)") from None
    if v != v:
        raise ValueError(f"--slo: {part!r} is not a number")
    return v
