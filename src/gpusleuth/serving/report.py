"""The serving section of a Report: ``gpusleuth load``'s levels, the knee and the outcomes at it.

Why its own module: the outcomes a person running a server pays and gets (requests/s, $ per 1M requests
and p95 at the knee, the accelerator's busy share, energy per request) are picked here once from the
analysis (``serving/analysis/load.py``), with the chart data the HTML draws (latency against throughput, one
point per level), so the console, the JSON and the page show the same numbers and renderers compute none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpusleuth.serving.analysis.load import LoadAnalysis
from gpusleuth.serving.analysis.tokens import Spread


@dataclass
class ServingOutcomes:
    """At the knee (or, with no knee, at the level with the best throughput: ``at_knee`` says which)."""

    level: int
    at_knee: bool
    rps: float
    p95_ms: float | None
    dollars_per_million: float | None
    price_note: str | None
    gpu_busy: float | None
    energy_j_per_request: float | None
    gpu_note: str | None
    # an LLM load, at the same level: joules per output token (its GPUs' energy over the level ÷ its answered
    # requests' output tokens), where that energy came from, $ per 1M output tokens; why not, in one sentence
    j_per_output_token: float | None = None
    energy_source: str | None = None
    dollars_per_million_output_tokens: float | None = None
    token_energy_note: str | None = None
    input_token_note: str | None = None


@dataclass
class ServingChart:
    """One point per level: x = requests/s, y = latency; labels name the level (concurrency or rate)."""

    labels: list[str]
    rps: list[float]
    p50_ms: list[float | None]
    p95_ms: list[float | None]
    knee: int | None
    budget_ms: float | None
    x_title: str


@dataclass
class LlmChart:
    """An LLM load's charts: TTFT and inter-token spreads per level (boxes: p10–p99 whiskers, p25–p75 box,
    p50 line), and goodput / throughput against the level (rate or concurrency) when an SLO was given."""

    labels: list[str]
    x: list[float]  # the level's concurrency or rate
    x_title: str
    ttft_ms: list[Spread | None]
    itl_ms: list[Spread | None]
    rps: list[float]
    output_tokens_per_s: list[float]
    goodput_rps: list[float | None]  # None without --slo
    attainment: list[float | None]
    slo_best: int | None


@dataclass
class ServingSection:
    load: LoadAnalysis
    outcomes: ServingOutcomes
    chart: ServingChart
    notes: list[str] = field(default_factory=list)
    llm: LlmChart | None = None  # an OpenAI-compatible load with token events

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**self.load.to_dict(), "outcomes": asdict(self.outcomes)}


def serving_section(load: LoadAnalysis | None) -> ServingSection | None:
    if load is None or not load.levels:
        return None
    i = load.at if load.at is not None else 0
    lv = load.levels[i]
    outcomes = ServingOutcomes(level=i, at_knee=load.knee is not None, rps=lv.rps, p95_ms=lv.p95_ms,
                               dollars_per_million=load.dollars_per_million, price_note=load.price_note,
                               gpu_busy=lv.gpu_busy, energy_j_per_request=lv.energy_j_per_request,
                               gpu_note=load.gpu_note, j_per_output_token=lv.j_per_output_token,
                               energy_source=load.energy_source,
                               dollars_per_million_output_tokens=lv.dollars_per_million_output_tokens,
                               token_energy_note=load.token_energy_note, input_token_note=load.input_token_note)
    chart = ServingChart(labels=[lv.label for lv in load.levels], rps=[lv.rps for lv in load.levels],
                         p50_ms=[lv.p50_ms for lv in load.levels], p95_ms=[lv.p95_ms for lv in load.levels],
                         knee=load.knee, budget_ms=load.p95_budget_ms,
                         x_title="concurrency" if load.mode == "closed" else "offered rate (req/s)")
    llm = None
    if any(lv.tokens is not None for lv in load.levels):
        levels = load.levels
        llm = LlmChart(labels=[lv.label for lv in levels],
                       x=[float(lv.concurrency) if load.mode == "closed" else lv.rate for lv in levels],
                       x_title=chart.x_title, ttft_ms=[lv.tokens.ttft_ms if lv.tokens else None for lv in levels],
                       itl_ms=[lv.tokens.itl_ms if lv.tokens else None for lv in levels], rps=[lv.rps for lv in levels],
                       output_tokens_per_s=[lv.tokens.output_tokens_per_s if lv.tokens else 0.0 for lv in levels],
                       goodput_rps=[lv.slo.goodput_rps if lv.slo else None for lv in levels],
                       attainment=[lv.slo.attainment if lv.slo else None for lv in levels], slo_best=load.slo_best)
    return ServingSection(load=load, outcomes=outcomes, chart=chart, notes=list(load.notes), llm=llm)
