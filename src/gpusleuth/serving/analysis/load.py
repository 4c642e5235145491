"""``analyze_load(run) -> LoadAnalysis``: what ``gpusleuth load`` measured, per level, and the knee.

Per level (one concurrency in closed loop, one rate in open loop): requests, answers, errors, timeouts,
throughput (2xx answers per second of the level's span), latency percentiles of the 2xx answers, and from
the server's telemetry when it was recorded (``serving/analysis/level_telemetry.py``): the accelerator's busy
share, the energy per request, the server's CPU.

**The knee** is the level to run the server at: the smallest level whose throughput is within 5 % of the
best level's and — with a p95 budget — whose p95 meets it. Levels where more than 1 % of requests failed
are not candidates (their throughput is not service). Past the knee more load only adds queueing: latency
grows, throughput does not. ``knee_reason`` says in words why that level (or why none).

Pure: reads ``run.load`` (and through ``level_telemetry`` the GPU, process and host samples); prices come in as
``dollars_per_second`` (bundle.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from gpusleuth.serving.analysis.level_telemetry import cpu_in, gpu_in
from gpusleuth.serving.analysis.tokens import SloLevel, TokenStats, level_slo, level_tokens
from gpusleuth.run.model import Run, Table

WITHIN_BEST = 0.05  # a level within 5 % of the best throughput counts as reaching it
MAX_FAILED = 0.01  # more failed requests than this and a level is not a knee candidate
GENERATOR_BUSY = 0.5  # cores of gpusleuth's own CPU in a level above which the report says so


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e6


@dataclass
class LoadLevel:
    level: int
    concurrency: int  # 0 in open loop
    rate: float  # requests/s asked for; 0 in closed loop
    start_ns: int
    end_ns: int
    requests: int  # sent (dropped ones included)
    ok: int  # 2xx answers
    errors: int  # non-2xx answers and connection errors
    timeouts: int
    rps: float  # 2xx answers per second of the level's span
    p50_ms: float | None  # latency of the 2xx answers
    p95_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    duration_s: float = 0.0
    dropped: int = 0  # open loop: not sent because max_inflight requests were outstanding
    lag_p95_ms: float | None = None  # open loop: how late the generator itself started requests (p95)
    gpu_busy: float | None = None  # mean accelerator utilization during the level, 0..1 (None: no GPU)
    energy_j_per_request: float | None = None  # GPU energy over the level / 2xx answers
    energy_j: float | None = None  # every recorded GPU's energy over the level's span, idle moments included
    # an LLM load: that energy over the output tokens of the level's answered requests, and the level's price
    # (price per second × its span) per million of them; None without a GPU / a price / tokens
    j_per_output_token: float | None = None
    dollars_per_million_output_tokens: float | None = None
    generator_cpu_cores: float | None = None  # gpusleuth's own CPU during the level (cores), when recorded
    # the recorded server (`load -- CMD`) during the level, from the process sampler: all its processes'
    # CPU (cores, mean over samples), its busiest process's (a Python server holding the GIL tops out near
    # 1.0), and the whole machine's CPU share (0..1, the generator included)
    server_cpu_cores: float | None = None
    server_top_process_cores: float | None = None
    host_cpu_share: float | None = None
    p90_ms: float | None = None
    cut: int = 0  # sent, then abandoned unanswered when the load was stopped (Ctrl-C, the server died)
    # failed requests by what went wrong: an HTTP status ("500", "429", "302") or an error code
    # ("connect", "timeout", "protocol", "api", "stream"); dropped and cut ones are not failures of the server
    errors_by: dict[str, int] = field(default_factory=dict)
    arrival_cv: float | None = None  # open loop: coefficient of variation of the gaps between actual sends
    tokens: TokenStats | None = None  # an OpenAI-compatible load: TTFT, inter-token gaps, tokens/s
    slo: SloLevel | None = None  # with --slo: attainment and goodput

    @property
    def failed(self) -> int:
        return self.errors + self.timeouts + self.dropped

    @property
    def label(self) -> str:
        return f"{self.concurrency}" if self.concurrency else f"{self.rate:g}/s"

    @property
    def named(self) -> str:
        return f"concurrency {self.concurrency}" if self.concurrency else f"rate {self.rate:g}/s"


@dataclass
class LoadAnalysis:
    mode: Literal["closed", "open"]  # closed: a fixed number of workers; open: requests started per second
    levels: list[LoadLevel]
    knee: int | None  # index into levels
    knee_reason: str
    best_rps: float
    p95_budget_ms: float | None = None
    url: str | None = None
    # the level the outcomes ($ per 1M requests, p95, busy share) are given at: the knee; without one, the
    # most throughput under the p95 budget, else the best throughput
    at: int | None = None
    dollars_per_million: float | None = None  # at ``at``, from the price per second
    price_note: str | None = None  # why there is no $ per 1M requests
    gpu_note: str | None = None  # why there is no busy share / energy (no GPU telemetry)
    notes: list[str] = field(default_factory=list)
    api: str = "http"  # "http", or the OpenAI endpoint ("chat", "completions")
    arrivals: str | None = None  # open loop: "constant", "poisson", "gamma"
    slo: dict[str, float] | None = None  # ttft_ms / itl_ms / e2e_ms budgets and the attainment target
    slo_best: int | None = None  # the highest level (rate or concurrency) that meets the SLO
    slo_reason: str | None = None
    energy_source: str | None = None  # level_telemetry.ENERGY_COUNTER, POWER_INTEGRAL or "mixed"; None: no GPU energy
    # an LLM load: why there is no joules per output token (one sentence), and why none per input token
    token_energy_note: str | None = None
    input_token_note: str | None = None

    @property
    def knee_level(self) -> LoadLevel | None:
        return self.levels[self.knee] if self.knee is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "url": self.url, "p95_budget_ms": self.p95_budget_ms,
                "levels": [asdict(lv) for lv in self.levels], "knee": self.knee, "knee_reason": self.knee_reason,
                "best_rps": self.best_rps, "at": self.at, "dollars_per_million_requests": self.dollars_per_million,
                "price_note": self.price_note, "gpu_note": self.gpu_note, "notes": self.notes, "api": self.api,
                "arrivals": self.arrivals, "slo": self.slo, "slo_best": self.slo_best, "slo_reason": self.slo_reason,
                "energy_source": self.energy_source, "token_energy_note": self.token_energy_note,
                "input_token_note": self.input_token_note}


def _ms(lat_ns: np.ndarray, q: float) -> float | None:
    return float(np.percentile(lat_ns, q)) / 1e6 if len(lat_ns) else None


def _levels(run: Run, slo: dict[str, float] | None) -> list[LoadLevel]:
    ld = run.load
    level = ld["level"].astype(np.int64)
    start, end = ld["start_ns"].astype(np.int64), ld["end_ns"].astype(np.int64)
    status = ld["status"].astype(np.int64)
    error = np.asarray(ld["error"]).astype(str)
    lag = ld["lag_ns"].astype(np.int64) if "lag_ns" in ld else np.zeros(len(ld), np.int64)
    llm = _token_columns(ld)
    out = []
    for i in np.unique(level):
        m = level == i
        ok = m & (status >= 200) & (status < 300) & (error == "")
        sent = m & (error != "dropped")
        lo, hi = int(start[m].min()), int(end[m].max())
        span = max(hi - lo, 1) / 1e9
        lat = (end[ok] - start[ok]).astype(np.float64)
        is_open = float(ld["rate"][m][0]) > 0
        busy, energy, _ = gpu_in(run, lo, hi)
        server_cpu, top_cpu, host_cpu = cpu_in(run, lo, hi)
        failed = m & ~ok & ~np.isin(error, ("dropped", "cancelled"))
        by: dict[str, int] = {}
        for st, err in zip(status[failed], error[failed]):
            key = str(int(st)) if err == "http" else err
            by[key] = by.get(key, 0) + 1
        cv = None
        if is_open and sent.sum() >= 3:
            gaps = np.diff(np.sort(start[sent] + lag[sent])).astype(np.float64)
            cv = float(gaps.std() / gaps.mean()) if gaps.mean() > 0 else None
        out.append(LoadLevel(
            level=int(i), concurrency=int(ld["concurrency"][m][0]), rate=float(ld["rate"][m][0]),
            start_ns=lo, end_ns=hi, requests=int(m.sum()), ok=int(ok.sum()),
            errors=int(failed.sum()) - int((m & (error == "timeout")).sum()),
            timeouts=int((m & (error == "timeout")).sum()), rps=float(ok.sum()) / span,
            p50_ms=_ms(lat, 50), p95_ms=_ms(lat, 95), p99_ms=_ms(lat, 99),
            max_ms=float(lat.max()) / 1e6 if len(lat) else None, duration_s=span,
            dropped=int((m & (error == "dropped")).sum()),
            lag_p95_ms=float(np.percentile(lag[m], 95)) / 1e6 if is_open else None,
            gpu_busy=busy, energy_j_per_request=energy / int(ok.sum()) if energy is not None and ok.any() else None,
            energy_j=energy, server_cpu_cores=server_cpu,
            server_top_process_cores=top_cpu, host_cpu_share=host_cpu, p90_ms=_ms(lat, 90),
            cut=int((m & (error == "cancelled")).sum()), errors_by=dict(sorted(by.items())), arrival_cv=cv,
            tokens=level_tokens(llm, m, ok, span) if llm is not None else None,
            slo=level_slo(llm, m, ok, span, slo) if llm is not None and slo else None))
    return out


def _token_columns(ld: Table) -> dict[str, np.ndarray] | None:
    """The columns an OpenAI-compatible load adds, when this load has them and any token was seen."""
    need = ("start_ns", "end_ns", "first_token_ns", "output_tokens", "input_tokens", "tokens_from", "token_ns")
    if not all(k in ld for k in need):
        return None
    if not (np.asarray(ld["first_token_ns"], dtype=np.float64) > 0).any() and \
            not (np.asarray(ld["output_tokens"], dtype=np.float64) >= 0).any():
        return None
    # the engine's own clock and cache counts: loads recorded before they were kept lack them
    return {k: ld[k] for k in (*need, "engine_prefill_ns", "engine_decode_ns", "cached_tokens") if k in ld}


def _knee(levels: list[LoadLevel], budget_ms: float | None) -> tuple[int | None, str, float]:
    best = max((lv.rps for lv in levels), default=0.0)
    if best <= 0:
        return None, "no level got a 2xx answer: there is no throughput to pick a knee from", best
    floor = (1 - WITHIN_BEST) * best
    failing = [lv for lv in levels if lv.requests and lv.failed / lv.requests > MAX_FAILED]
    near = [i for i, lv in enumerate(levels) if lv.rps >= floor and lv not in failing]
    skipped = (f"; {len(failing)} level(s) with more than {MAX_FAILED:.0%} failed requests not considered"
               if failing else "")
    if budget_ms is None:
        if not near:
            return None, f"every level within 5 % of the best throughput had failed requests{skipped}", best
        i = near[0]
        return i, (f"smallest level within 5 % of the best throughput ({best:,.1f} req/s); no --p95-budget-ms "
                   f"was given, so latency did not count{skipped}"), best
    fits = [i for i in near if (p95 := levels[i].p95_ms) is not None and p95 <= budget_ms]
    if fits:
        i = fits[0]
        return i, (f"smallest level within 5 % of the best throughput ({best:,.1f} req/s) whose p95 "
                   f"({levels[i].p95_ms:,.1f} ms) meets the {budget_ms:g} ms budget{skipped}"), best
    under = [lv for lv in levels if lv.p95_ms is not None and lv.p95_ms <= budget_ms and lv not in failing]
    if under:
        top = max(under, key=lambda lv: lv.rps)
        hint = (f"; the most throughput under the budget is {top.rps:,.1f} req/s at {top.named} "
                f"(p95 {top.p95_ms:,.1f} ms)")
    else:
        hint = "; no level met the budget at all"
    return None, (f"no level within 5 % of the best throughput ({best:,.1f} req/s) meets the {budget_ms:g} ms "
                  f"p95 budget{hint}{skipped}"), best


def _operating(levels: list[LoadLevel], knee: int | None, budget: float | None) -> tuple[int, str | None]:
    """Where to read the outcomes: the knee; else the most throughput under the budget; else the best."""
    if knee is not None:
        return knee, None
    under = [i for i, lv in enumerate(levels) if budget is not None and lv.p95_ms is not None and lv.p95_ms <= budget]
    if under:
        return max(under, key=lambda i: levels[i].rps), "no knee: priced at the most throughput under the p95 budget"
    return max(range(len(levels)), key=lambda i: levels[i].rps), "no knee: priced at the best throughput"


def analyze_load(run: Run, dollars_per_second: float | None = None, gpu_note: str | None = None) -> LoadAnalysis | None:
    """The load levels of ``run`` (None when ``gpusleuth load`` did not write any)."""
    if not len(run.load) or not {"level", "start_ns", "end_ns", "status", "error"} <= set(run.load.columns):
        return None
    written = run.meta.get("load")
    meta: dict[str, Any] = written if isinstance(written, dict) else {}
    budget = float(meta["p95_budget_ms"]) if _is_num(meta.get("p95_budget_ms")) else None
    slo = _slo_of(meta.get("slo"))
    levels = _levels(run, slo)
    cpu = meta.get("generator_cpu_cores")
    if isinstance(cpu, list) and len(cpu) == len(levels) and all(_is_num(c) for c in cpu):
        for lv, c in zip(levels, cpu):
            lv.generator_cpu_cores = float(c)
    knee, reason, best = _knee(levels, budget)
    mode: Literal["closed", "open"] = "open" if any(lv.rate > 0 for lv in levels) else "closed"
    at_i, at_note = _operating(levels, knee, budget)
    at = levels[at_i]
    dollars, price_note = None, None
    if dollars_per_second is None:
        price_note = ("unpriced: no GPU was recorded and no price given (--price-per-gpu-hour: the server's price per hour)" if gpu_note
                      else "unpriced: no price is known for this GPU (--price-per-gpu-hour)")
    elif at.rps > 0:
        dollars = dollars_per_second / at.rps * 1e6
        price_note = at_note
    notes = [str(n) for n in meta.get("notes") or [] if isinstance(n, str)] if isinstance(meta.get("notes"), list) else []
    if run.meta.get("source") == "load":  # `gpusleuth load URL` without a command: only the client side
        gpu_note = "the server was not recorded (start it under gpusleuth: `gpusleuth load URL … -- CMD`)"
        if run.meta.get("server_run"):  # it was, but its report could not be built: the client's side alone
            gpu_note = f"the recorded server's report could not be built (its run: {run.meta['server_run']})"
    if mode == "open" and any(lv.dropped for lv in levels):
        notes.append("some requests were dropped: more than max_inflight were outstanding (the server could not "
                     "keep up with the rate)")
    late = [lv.lag_p95_ms for lv in levels if lv.lag_p95_ms is not None and lv.lag_p95_ms > 10]
    if late:
        notes.append(f"the load generator started requests late (p95 lag up to {max(late):,.0f} "
                     "ms): that rate is beyond this machine, not only the server; latencies count from the schedule")
    busy = max((lv.generator_cpu_cores or 0.0 for lv in levels), default=0.0)
    if busy > GENERATOR_BUSY:
        notes.append(f"the load generator itself used up to {busy:.2f} of a CPU core: if the server runs on this "
                     "machine that CPU was not the server's — load it from another machine for its true ceiling")
    notes.extend(_failure_notes(run))
    api = str(meta["api"]) if meta.get("api") in ("http", "chat", "completions") else "http"
    if api != "http":
        notes.extend(_api_notes(levels, api))
    doubt = sum(lv.tokens.engine.over_e2e for lv in levels if lv.tokens is not None and lv.tokens.engine is not None)
    if doubt:
        notes.append(f"{doubt:,} request(s) were timed longer by the engine's own clock (its answers' timings) than "
                     "by the client, by more than 1 ms: its clock and ours disagree there, so its split of them is "
                     "not exact")
    slo_best, slo_reason = _slo_best(levels, slo, mode) if slo else (None, None)
    if gpu_note is None and not any(lv.gpu_busy is not None or lv.energy_j is not None for lv in levels):
        gpu_note = "no GPU"
    energy_source, token_note, input_note = _token_costs(run, levels, dollars_per_second, gpu_note)
    url = meta.get("url") if isinstance(meta.get("url"), str) else None
    arrivals = meta.get("arrivals") if mode == "open" and meta.get("arrivals") in ("constant", "poisson", "gamma") else None
    return LoadAnalysis(mode=mode, levels=levels, knee=knee, knee_reason=reason, best_rps=best,
                        p95_budget_ms=budget, url=url, at=at_i, dollars_per_million=dollars, price_note=price_note,
                        gpu_note=None if any(lv.gpu_busy is not None for lv in levels) else (gpu_note or "no GPU"),
                        notes=notes, api=api, arrivals=arrivals, slo=slo, slo_best=slo_best, slo_reason=slo_reason,
                        energy_source=energy_source, token_energy_note=token_note, input_token_note=input_note)


def _token_costs(run: Run, levels: list[LoadLevel], dollars_per_second: float | None,
                 gpu_note: str | None) -> tuple[str | None, str | None, str | None]:
    """Each LLM level's joules per output token (all the GPUs' energy over the level's span ÷ the output tokens
    of its answered requests: the moments no token was made are paid by those that were) and dollars per
    million output tokens (the level's price ÷ its tokens); (the energy's source, why no joules per output
    token, why none per input token)."""
    llm = [lv for lv in levels if lv.tokens is not None]
    for lv in llm:
        assert lv.tokens is not None
        n = lv.tokens.output_tokens
        if n > 0 and lv.energy_j is not None:
            lv.j_per_output_token = lv.energy_j / n
        if n > 0 and dollars_per_second is not None:
            lv.dollars_per_million_output_tokens = dollars_per_second * lv.duration_s / n * 1e6
    if not llm:
        return None, None, None
    _, _, source = gpu_in(run, min(lv.start_ns for lv in levels), max(lv.end_ns for lv in levels))
    if source is None:
        why = gpu_note or "no GPU"
        return None, (f"joules per token not measured: no GPU was recorded ({why}), and a CPU-only run has no "
                      "energy counter to read"), None
    if not any(lv.j_per_output_token is not None for lv in llm):
        return source, "joules per token not measured: no level's answers counted their output tokens", None
    return source, None, ("joules per input token not given: prefill and decode ran in the same engine steps "
                          "under one energy counter, and nothing in this load tells their energy apart")


def _slo_of(value: Any) -> dict[str, float] | None:
    if not isinstance(value, dict):
        return None
    out = {k: float(v) for k, v in value.items()
           if k in ("ttft_ms", "itl_ms", "e2e_ms", "attainment") and _is_num(v) and v > 0}
    return out if any(k != "attainment" for k in out) else None


def _slo_best(levels: list[LoadLevel], slo: dict[str, float], mode: Literal["closed", "open"]) -> tuple[int | None, str]:
    """The highest level whose attainment meets the target, in words."""
    target = slo.get("attainment", 0.9)
    meeting = [i for i, lv in enumerate(levels) if lv.slo is not None and lv.slo.meets]
    if not meeting:
        if not any(lv.slo is not None for lv in levels):
            return None, "no level streamed tokens to hold against the SLO"
        top = max(levels, key=lambda lv: lv.slo.attainment if lv.slo else -1.0)
        return None, (f"no level meets the SLO ({target:.0%} of requests within every budget); the best is "
                      f"{top.named} at {top.slo.attainment:.0%}" if top.slo else "no level meets the SLO")
    i = max(meeting, key=lambda j: levels[j].concurrency if mode == "closed" else levels[j].rate)
    lv = levels[i]
    assert lv.slo is not None
    return i, (f"{lv.named} is the highest level meeting the SLO: {lv.slo.attainment:.0%} of requests within "
               f"every budget (target {target:.0%}), goodput {lv.slo.goodput_rps:,.2f} req/s, "
               f"{lv.slo.goodput_tokens_per_s:,.0f} output tokens/s")


def _failure_notes(run: Run) -> list[str]:
    """One sentence per kind of failure, with its most common detail (an untrusted server's words, quoted
    by the generator): what the server answered that was not a usable answer, and requests cut by a stop."""
    ld = run.load
    if "detail" not in ld:
        return []
    error = np.asarray(ld["error"]).astype(str)
    detail = np.asarray(ld["detail"]).astype(str)
    notes = []
    words = {"protocol": "answers were not HTTP", "api": "2xx answers were not OpenAI answers",
             "stream": "streams were malformed or cut", "timeout": "requests timed out",
             "connect": "requests failed to connect or were reset", "cancelled": "requests were cut unanswered"}
    for code, what in words.items():
        m = error == code
        if not m.any():
            continue
        texts, counts = np.unique(detail[m], return_counts=True)
        top = str(texts[int(np.argmax(counts))])
        sent = int((error != "dropped").sum())
        if code == "cancelled":
            notes.append(f"{int(m.sum()):,} of the {sent:,} requests sent were in flight when the load was stopped "
                         "and were cut unanswered (not counted as errors or in any latency)")
        else:
            notes.append(f"{int(m.sum()):,} {what}" + (f" — e.g. {top}" if top else ""))
    return notes


def _api_notes(levels: list[LoadLevel], api: str) -> list[str]:
    """A server that answers an OpenAI endpoint with something else: said once, plainly."""
    endpoint = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    sent = sum(lv.requests - lv.dropped - lv.cut for lv in levels)
    answered = sum(lv.ok for lv in levels)
    wrong = sum(lv.errors_by.get("api", 0) + lv.errors_by.get("404", 0) + lv.errors_by.get("405", 0)
                + lv.errors_by.get("protocol", 0) for lv in levels)
    if sent and not answered and wrong >= sent / 2:
        return [f"the server does not look OpenAI-compatible: {wrong:,} of {sent:,} requests to {endpoint} got "
                "a 404/405, a non-HTTP answer or an answer without `choices`"]
    return []
