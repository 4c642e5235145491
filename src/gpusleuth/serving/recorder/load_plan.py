"""What ``gpusleuth load`` sends: the plan (the URL, the levels, how long each lasts, the bodies or prompts, the
arrivals, the SLO) and each request's body in order over the run.

Apart from the generator (``serving/recorder/loadgen.py``) because the CLI builds a plan from flags
(``cli/load_plan.py``) and ``meta.json`` keeps it (``LoadPlan.to_meta``) without anything that sends a request.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from gpusleuth.run.meta import JsonObject
from gpusleuth.serving.recorder.http_client import ServerTarget, parse_target, safe_url
from gpusleuth.serving.recorder.openai_api import request_body
from gpusleuth.serving.recorder.prompts import Lengths, Prompt, PromptSource, shared_prefix

MODES = ("closed", "open")
APIS = ("http", "chat", "completions")


@dataclass
class LoadPlan:
    url: str
    mode: str  # "closed" (levels are concurrencies) or "open" (levels are rates, requests/s)
    levels: list[float]
    duration_s: float = 10.0
    requests: int | None = None  # per level, at most
    timeout_s: float = 10.0
    method: str = "GET"
    headers: list[tuple[str, str]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=lambda: [b""])
    max_inflight: int = 1024  # open loop: outstanding requests before new ones are dropped
    pause_s: float = 0.2  # between levels, so one level's queue does not spill into the next
    p95_budget_ms: float | None = None
    insecure: bool = False  # https: do not check the certificate
    arrivals: str = "constant"  # open loop: "constant", "poisson", "gamma"
    cv: float = 1.0  # gamma: the coefficient of variation of the gaps between arrivals
    seed: int = 0
    api: str = "http"  # "http" (bodies as given), "chat" / "completions" (OpenAI-compatible, from prompts)
    prompts: list[Prompt] = field(default_factory=list)  # a dataset's, sent in order once each across the run
    # synthetic prompts instead, drawn fresh for every request: (input lengths, output lengths or None)
    synthetic: tuple[Lengths, Lengths | None] | None = None
    shared_prefix: int = 0  # words every prompt starts with, shared on purpose (an engine's prefix cache)
    model: str | None = None
    stream: bool = True
    extra_body: JsonObject = field(default_factory=dict)  # merged into every OpenAI request body (the user's JSON)
    slo: dict[str, float] = field(default_factory=dict)  # ttft_ms, itl_ms, e2e_ms, attainment (0..1)
    notes: list[str] = field(default_factory=list)  # said before the first level (dataset lines skipped)
    # requests sent together once the server is ready, before the first level and in no level: a cold engine's
    # start (compiling, a batch manager's first batch, lazy loading) is not measured as the first level's latency
    warmup: int = 0
    # the stall watch's threshold (--stall-after): "auto", "off" or seconds; None: $GPUSLEUTH_LOAD_STALL_AFTER
    stall_after: str | None = None

    def target(self) -> ServerTarget:
        return parse_target(self.url, self.method, self.headers, verify=not self.insecure)

    def to_meta(self) -> dict[str, object]:
        """What ``meta["load"]`` keeps: the parameters, with the URL's credentials and query stripped."""
        return {"url": safe_url(self.url), "mode": self.mode, "method": self.method, "levels": self.levels,
                "duration_s": self.duration_s, "requests_per_level": self.requests, "timeout_s": self.timeout_s,
                "p95_budget_ms": self.p95_budget_ms, "bodies": len(self.bodies),
                "max_inflight": self.max_inflight if self.mode == "open" else None, "insecure": self.insecure,
                "arrivals": self.arrivals if self.mode == "open" else None,
                "cv": self.cv if self.mode == "open" and self.arrivals == "gamma" else None, "seed": self.seed,
                "api": self.api, "model": self.model, "stream": self.stream if self.api != "http" else None,
                "prompts": len(self.prompts) if self.api != "http" and self.synthetic is None else None,
                "synthetic_prompts": self.synthetic is not None if self.api != "http" else None,
                "shared_prefix_tokens": self.shared_prefix if self.api != "http" else None, "slo": dict(self.slo) or None,
                "warmup_requests": self.warmup}


class RequestBodies:
    """Each request's (body, prompt index), in order over the whole run: one per run, shared by all its levels.
    Plain HTTP: the bodies round robin (prompt index -1). An LLM endpoint: the next prompt of the run's
    ``PromptSource`` — a fresh synthetic prompt per request, or a dataset's next line — built into a request
    with the plan's model as it is when sent (it may be discovered after the plan was made)."""

    def __init__(self, plan: LoadPlan):
        self.plan = plan
        self._http = itertools.cycle(plan.bodies or [b""])
        self.source: PromptSource | None = None
        if plan.api != "http":
            lengths = plan.synthetic if plan.synthetic is not None or plan.prompts else (Lengths(128), Lengths(128))
            self.source = PromptSource(plan.prompts, lengths, plan.seed, shared_prefix(plan.shared_prefix, plan.seed))

    def __iter__(self) -> "RequestBodies":
        return self

    def __next__(self) -> tuple[bytes, int]:
        if self.source is None:
            return next(self._http), -1
        p = self.plan
        pr, i = self.source.next()
        return request_body(p.api, pr.payload(), pr.max_tokens, p.model, p.stream, p.extra_body), i
