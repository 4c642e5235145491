"""What a cluster's metrics server says about its GPUs: the typed input of the GPU ledger.

``ledger/sources/prom_fleet.py`` fills these from any Prometheus HTTP API (dcgm-exporter and kube-state-metrics
series); ``ledger/analysis/ledger.py`` reads nothing else. One :class:`GpuSeries` is one GPU over the whole window
on a fixed grid (``start_s + k * step_s``), columnar, NaN where the server had no sample: the ledger is a
fold over GPUs, so only a batch of them is ever in memory. Every field is plain data (numpy columns,
strings, numbers): the DuckDB cache (ledger/sources/fleet_cache.py) stores its samples and restores it without loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# the per-sample columns of a GpuSeries, in the units dcgm-exporter publishes them
SAMPLE_COLUMNS = ("util", "sm_active", "tensor_active", "fb_used_mib", "fb_free_mib", "power_w", "gr_active", "energy_mj",
                  "sm_clock_mhz")
# float32 holds every column but the energy counter (mJ since boot: ~1e12 after weeks, where float32 steps by 1e5)
COLUMN_DTYPE = {c: np.dtype(np.float64 if c == "energy_mj" else np.float32) for c in SAMPLE_COLUMNS}


@dataclass(frozen=True)
class Owner:
    """Who held a GPU at a sample, from dcgm-exporter's Kubernetes (or HPC job) labels."""

    namespace: str
    pod: str
    container: str = ""
    group: str = ""  # the value of a user-chosen job/user label (``--group-label``), else ""

    @property
    def name(self) -> str:
        if not self.pod:  # an HPC job label alone
            return self.group
        return f"{self.namespace}/{self.pod}" + (f"/{self.container}" if self.container else "")


@dataclass
class GpuSeries:
    """One GPU's samples on the window's grid; ``owner[k]`` indexes ``holders`` (-1: no pod held it).

    A holder is the pods that held the GPU at a step, as indexes into ``owners``: one pod, or several when the
    GPU is time-sliced (dcgm-exporter repeats the device's series once per pod sharing it). Without
    ``holders``, holder ``i`` is the one pod ``owners[i]``."""

    uuid: str
    host: str
    gpu: str  # the device index dcgm-exporter reports
    model: str  # modelName, e.g. "NVIDIA H100 80GB HBM3"
    start_s: int
    step_s: int
    columns: dict[str, np.ndarray]  # SAMPLE_COLUMNS → arrays (COLUMN_DTYPE), NaN = no sample
    owner: np.ndarray  # int32 per sample
    owners: list[Owner] = field(default_factory=list)
    mig_profile: str = ""  # GPU_I_PROFILE when the series is a MIG instance
    holders: list[tuple[int, ...]] = field(default_factory=list)

    def holder(self, i: int) -> tuple[int, ...]:
        """The indexes into ``owners`` of the pods behind holder ``i``."""
        return self.holders[i] if self.holders else (i,)

    def __len__(self) -> int:
        return len(self.owner)

    def times(self) -> np.ndarray:
        return self.start_s + self.step_s * np.arange(len(self.owner), dtype=np.int64)


@dataclass
class PodRequest:
    """A pod's GPU request from kube-state-metrics, reduced over the window (a pod is few numbers)."""

    namespace: str
    pod: str
    container: str
    node: str
    gpus: float  # the largest request seen
    samples: int  # grid steps at which the request series existed
    first_s: int
    last_s: int


@dataclass
class PodTokens:
    """An inference engine's token counters for one pod and model, on the window's grid (NaN: no sample): the raw
    counters (they reset when the engine restarts), e.g. vLLM's ``vllm:generation_tokens_total``."""

    namespace: str
    pod: str
    model: str
    generated: np.ndarray  # output tokens counter, float64
    prompt: np.ndarray  # input (prompt) tokens counter, float64; NaN where the engine does not export it


@dataclass
class FleetWindow:
    """The query: which server, which time range, at what step, and what it held."""

    server: str
    start_s: int
    end_s: int
    step_s: int
    gpus: int = 0  # GPUs seen in the window
    cadence: dict[int, int] = field(default_factory=dict)  # seconds between a device's samples → devices so sampled
    step_given: bool = False  # --step was given (else the step was chosen from the cadence)
    conventions: list[str] = field(default_factory=list)  # owner labels found: "pod", "exported", "hpc_job"
    metrics: list[str] = field(default_factory=list)  # the DCGM metrics the server had
    has_kube_requests: bool = False
    group_label: str | None = None
    notes: list[str] = field(default_factory=list)  # what was missing or salvaged, as sentences
    requests: list[PodRequest] = field(default_factory=list)
    tokens: list[PodTokens] = field(default_factory=list)
    cache: str | None = None  # what the cache did ("12 of 14 chunks from cache"), None without one

    @property
    def steps(self) -> int:
        return max(0, (self.end_s - self.start_s) // self.step_s)
