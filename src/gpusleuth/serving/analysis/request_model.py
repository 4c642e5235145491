"""What the request analyses hand on — a server's requests per stage, per load level, the SLO misses and one
replica's capacity — in a leaf module: ``requests.py`` computes ``RequestAnalysis`` and fills it with what
``slo_miss.py``, ``capacity.py`` and ``outside_server.py`` compute from it, so the types live apart from all
four and none of them imports another back (issue 35: no import cycle). Facts, the report and the renderers
read these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpusleuth.serving.analysis.batch_stats import BatchStats


PEGGED_CORES = 0.8  # a server process averaging this much of one core or more is CPU-bound on its GIL


@dataclass
class StageStats:
    """A named stage (``gpusleuth.stage``) or one of queue/pre/infer/post, over the requests."""

    name: str
    share: float  # of service time (queue: of latency)
    total_s: float
    p50_ms: float
    p95_ms: float
    requests: int  # requests that had it


@dataclass
class RequestLevel:
    """The requests the server finished inside one load level's window (``gpusleuth load``)."""

    level: int
    concurrency: int
    rate: float
    requests: int
    shares: dict[str, float]  # pre / infer / post of service time, queue of latency
    p95_ms: float | None  # latency (queue + service) p95 inside the server
    queue_p95_share: float | None  # the queue's part of the p95 latency: 1 − p95(without queue) / p95
    rps: float  # requests finished per second of the window
    server_cores: float | None  # the server process's mean CPU, in cores
    gpu_busy: float | None  # mean accelerator utilization, 0..1
    # a batching server: forwards outside any request that started in the level, and the requests each served
    batch_forwards: int = 0
    batch_size_p50: float | None = None
    batch_size_p90: float | None = None
    batch_size_max: int | None = None
    batch_sizes: dict[str, int] = field(default_factory=dict)  # requests per forward → forwards
    # the level's batched requests: their wait before the batcher took the work / after (collecting more)
    batch_queued_share: float | None = None
    batch_collect_share: float | None = None
    # the client's side (`gpusleuth load`'s answers of the level) against the server's: what passed outside the
    # server's request handling — the network, the listen backlog, connection handling before the server
    # started the request, the response's trip back
    client_p50_ms: float | None = None
    server_p50_ms: float | None = None  # queue (when measured) + service
    outside_p50_ms: float | None = None  # per request when the two join on X-Request-Id, else client − server p50
    outside_share: float | None = None  # of the client's latency: the median request's share
    outside_joined: int = 0  # requests joined on X-Request-Id (0: compared by level)


@dataclass
class RequestAnalysis:
    count: int  # requests with at least one model forward
    no_forward: int  # requests without one (left out of the shares)
    kinds: dict[str, int]  # http.server / wsgi / asgi → requests
    pids: list[int]  # the server processes
    span_s: float  # first request's start → last one's end
    busy_s: float  # time with at least one request in the server
    service_s: float  # sum of the requests' service times
    rps: float  # requests per second of the span
    in_flight: float  # mean requests in the server while busy (service_s / busy_s)
    shares: dict[str, float]  # pre / infer / post of service time; queue of latency (when measured)
    parts: dict[str, StageStats]  # queue / pre / infer / post
    stages: list[StageStats]  # named stages, largest first
    queue_measured: int  # requests whose queue was measured
    queue_p95_share: float | None  # the queue's part of the p95 latency: 1 − p95(without queue) / p95
    latency_p50_ms: float
    latency_p95_ms: float
    forwards_per_request: float
    batch_p50: float | None  # rows of a request's first forward input (None: not a tensor)
    server_cores: float | None  # the server's mean CPU over the span, in cores (None: no samples)
    server_cores_p90: float | None
    logical_cores: int | None
    gpu_busy: float | None  # mean accelerator utilization during the requests, 0..1 (None: no GPU)
    gpu_mem_share: float | None  # peak device memory used / total during the requests
    # pre / infer / post of the requests no other request overlapped: what a request costs with nothing to
    # wait for (no lock, no GIL held by another request's work) — the floor the loaded shares are read against
    alone_requests: int = 0
    alone_shares: dict[str, float] = field(default_factory=dict)
    levels: list[RequestLevel] = field(default_factory=list)  # filled when load levels exist
    batching: BatchStats | None = None  # a batching server (forwards outside the requests), else None
    note: str | None = None  # one sentence when requests could not be attributed to the model's forwards
    misses: list[MissLevel] = field(default_factory=list)  # per level with SLO misses
    capacity: Capacity | None = None  # under `gpusleuth load` with two levels or more
    # the serving framework the hook patched ("litserve", "ray_serve", "bentoml"; None: another server or none
    # known): its fixes name that framework's own knobs (serving/rules/knobs.py)
    framework: str | None = None
    # the rows behind the numbers, to split by load level without going back to the Run
    _rows: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _batches: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # forwards outside requests

    @property
    def cpu_pegged(self) -> bool | None:
        return None if self.server_cores is None else self.server_cores >= PEGGED_CORES

    def to_dict(self) -> dict[str, Any]:
        """The report's ``request_stages`` block (its rows stay behind: they are in requests.parquet)."""
        from dataclasses import asdict, fields

        out = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
        out["parts"] = {k: asdict(v) for k, v in self.parts.items()}
        out["stages"] = [asdict(s) for s in self.stages]
        out["levels"] = [asdict(lv) for lv in self.levels]
        out["batching"] = asdict(self.batching) if self.batching is not None else None
        out["misses"] = [asdict(m) for m in self.misses]
        out["capacity"] = asdict(self.capacity) if self.capacity is not None else None
        out["cpu_pegged"] = self.cpu_pegged
        return out


@dataclass
class MissLevel:
    level: int
    concurrency: int
    rate: float
    answered: int
    missed: int  # answered requests over at least one budget
    joined: int  # of the missed, joined to the server's record on X-Request-Id
    missed_by: dict[str, int]  # budget → answered requests over it
    parts_ms: dict[str, float]  # p50 of each part over the joined missed requests
    baseline_ms: dict[str, float]  # p50 of each part over the lightest level's answered requests
    excess_ms: dict[str, float]  # parts_ms − baseline_ms
    dominant: str | None  # the part that grew most (among those before the first token for TTFT-only misses)
    baseline_level: int  # the lightest level's index
    decode_per_token_ms: float | None = None  # over the joined missed requests, p50
    baseline_decode_per_token_ms: float | None = None
    ttft_only: bool = False  # every missed request missed only its TTFT budget
    notes: list[str] = field(default_factory=list)
    # prefill delayed by others' decode (a continuous-batching engine, its forwards joined to the requests):
    # over the joined missed requests whose TTFT grew past the lightest level's p90, the others' decode-only
    # forwards each waited behind before its own first forward (serving/analysis/batching.py)
    ttft_grew: int = 0  # such requests with their forwards joined (0: not a batching engine, or none grew)
    behind_decode_share: float | None = None  # Σ time behind others' decode ÷ Σ their TTFT (client)
    behind_decode_p50_ms: float | None = None
    behind_steps_p50: float | None = None
    behind_decode_ms: float | None = None  # summed over those requests
    ttft_p50_ms: float | None = None  # their TTFT (client), p50
    baseline_ttft_p90_ms: float | None = None  # the lightest level's TTFT p90: "grew" is past this


@dataclass
class CapacityLevel:
    level: int
    concurrency: int
    rate: float
    rps: float  # answers per second
    goodput_rps: float | None  # requests meeting the SLO per second (None without --slo)
    tokens_per_s: float | None  # output tokens per second (an LLM load)
    goodput_tokens_per_s: float | None
    meets: bool | None  # met the latency target (SLO, else p95 budget); None: no target given
    model_busy: float | None  # share of the level's span the model worked for someone (None: no forward seen)
    waiting_p50_ms: float | None  # queue + batch/engine wait (p50) + time outside the server (p50)
    latency_p50_ms: float | None  # the client's
    pre_share: float | None  # of service time: work before the model (tokenization, preprocessing)
    collect_share: float | None  # of service time: held by a batcher collecting more work (its wait window)
    batch_p50: float | None  # requests per forward (a batching server or engine)


@dataclass
class Capacity:
    levels: list[CapacityLevel]
    target: str  # "the SLO", "the p95 budget", "throughput" (no latency target: the knee of throughput)
    per_replica_level: int | None  # the level one replica served within the target (None: none did)
    per_replica_concurrency: int | None  # closed loop: its concurrency
    per_replica_rps: float | None  # its requests/s (goodput with an SLO)
    per_replica_tokens_per_s: float | None
    next_level: int | None  # the next heavier level, which missed the target: capacity lies between the two
    offered_level: int  # the heaviest level
    offered_concurrency: int | None  # closed loop
    offered_rps: float | None  # open loop: the rate asked
    replicas: int | None  # replicas needed for the heaviest level's load within the target
    notes: list[str] = field(default_factory=list)
    # is the heaviest level's one replica simply full? (see ``_saturation``)
    saturated: bool = False
    reference_level: int | None = None  # the lighter level (at most half the load) with the most throughput
    waiting_growth_ms: float | None = None  # the heaviest level's waiting p50 − the lightest level's
    held_by: str | None = None  # why it is not saturation although requests wait: "a batch window", "preprocessing"
