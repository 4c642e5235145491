"""What the fleet ledger hands on, in a leaf module: the classes and reason codes, the pricing, one GPU × one
owner's usage (``Usage``), and the ledger's rows and totals (``Workload``, ``ModelTotal``, ``NamespaceTotal``,
``Ledger``). The fold (``fold.py``), the energy (``energy.py``), the served models (``tokens.py``) and the
assembly (``ledger.py``) compute them; the report and the renderers read them. See ``ledger.py`` for what each
class of GPU-hours means."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpusleuth.analysis.cost import PRICES_DATE, price_table
from gpusleuth.analysis.peaks import lookup_peak
from gpusleuth.ledger.analysis.power_cap import CapSums, CapWhatIf
from gpusleuth.ledger.analysis.sizing import Sizing
from gpusleuth.ledger.run.fleet_usage import FleetWindow, Owner

IDLE_MAX = 0.01  # activity below this: nothing runs
LOW_MAX = 0.15  # below this (and not idle): low activity
MIN_SPAN_S = 1800  # idle spans shorter than this are not listed (they still count in the hours)
MAX_SPANS = 20  # per workload, longest first
CLASSES = ("productive", "low_activity", "allocated_idle", "unallocated", "no_data")
IDLE, LOW, PROD, UNALLOC, GAP = "allocated_idle", "low_activity", "productive", "unallocated", "no_data"
REASONS = {
    "IDLE_ALLOCATED": "held a GPU and ran nothing on it",
    "PART_TIME": "idle for long stretches between work",
    "LOW_ACTIVITY": "held a GPU it mostly left unused",
    "OVERSIZED": "uses a fraction of its card",
    "PRODUCTIVE": "used its GPU",
    "UNALLOCATED": "no pod held the GPU",
}


@dataclass
class Pricing:
    """USD per GPU-hour by card: one rate for all (``--price-per-gpu-hour``), else the user's table over the dated
    defaults (analysis/cost.py), matched on the card's family name (analysis/peaks.py) or its exact modelName."""

    override: float | None = None
    user: dict[str, float] = field(default_factory=dict)

    @property
    def table(self) -> dict[str, float]:
        return price_table(self.user)

    @property
    def source(self) -> str:
        if self.override is not None:
            return f"--price-per-gpu-hour {self.override:g} for every card"
        return f"price table ({PRICES_DATE} on-demand list prices{', with your --prices' if self.user else ''})"

    def per_gpu_hour(self, model: str) -> float | None:
        if self.override is not None:
            return self.override
        table = self.table
        if model in table:
            return table[model]
        peak = lookup_peak(model, "fp32")
        return table.get(peak.model) if peak else None

    def card(self, model: str) -> str:
        peak = lookup_peak(model, "fp32")
        return peak.model if peak else model

    def tflops(self, model: str) -> float | None:
        peak = lookup_peak(model, "fp16")
        return peak.tflops if peak else None


@dataclass
class Usage:
    """One GPU × one owner (or no owner) over the window: seconds by class and the percentiles sizing needs."""

    uuid: str
    host: str
    model: str
    owner: Owner | None
    seconds: dict[str, float]
    mem_p99_mib: float
    mem_max_mib: float
    card_mib: float
    activity_p95: float
    activity_source: str  # "sm_active" | "gr_active" | "util" | "mixed"
    mig_profile: str  # the GPU instance's profile, "" for a whole GPU
    tensor_mean: float
    idle_spans: list[tuple[int, int]]  # [start, end) epoch seconds, ≥ MIN_SPAN_S
    shared_s: float = 0.0  # of its seconds, those it held the GPU together with other pods (time-slicing)
    shared_with: int = 0  # the most pods it shared the GPU with at once, itself included
    energy_j: float = 0.0  # its share of the GPU's energy (a MIG instance: its slices' share of the card's)
    idle_energy_j: float | None = None  # of it, at steps its pod generated no token (None: no token counters)
    energy_source: str = ""  # "counter" (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION), "power" (power × time), both, ""
    energy_resets: int = 0  # the energy counter's resets on this GPU in the window
    cap: CapSums | None = None  # the power-cap what-if's sums (with --power-cap)
    # a pod with token counters: its share of this GPU's joules per step (the prefill/decode fit's input;
    # the ledger sums it per pod and drops it from here)
    energy_steps: np.ndarray | None = None


@dataclass
class GpuGap:
    uuid: str
    host: str
    seconds: float
    longest: tuple[int, int]


@dataclass
class IdleSpan:
    uuid: str
    host: str
    start_s: int
    end_s: int

    @property
    def hours(self) -> float:
        return (self.end_s - self.start_s) / 3600


@dataclass
class Workload:
    """One pod (namespace/pod/container), or one GPU no pod held, over all the GPUs it had."""

    key: str
    namespace: str
    pod: str
    container: str
    group: str
    model: str
    gpus: int
    hours: dict[str, float]
    price: float | None
    usd: dict[str, float | None]
    reason: str
    mem_p99_mib: float
    card_mib: float
    activity_p95: float
    activity_source: str
    idle_spans: list[IdleSpan]
    sizing: Sizing | None
    card: str = ""  # the family name prices and peaks use ("H100 SXM"), else the modelName
    requested_gpus: float | None = None
    requested_hours: float | None = None
    hosts: list[str] = field(default_factory=list)
    uuids: list[str] = field(default_factory=list)
    shared_h: float = 0.0  # of its hours, those on a time-sliced GPU it shared with other pods (its share)
    shared_with: int = 0  # the most pods on one of its GPUs at once, itself included (0: never shared)
    energy_j: float = 0.0  # the energy of its GPUs while it held them (its share of each)
    idle_energy_j: float | None = None  # of it, at steps it generated no token (None: no token counters)
    tokens_out: float | None = None  # output tokens its inference engine generated in the window (None: no counters)
    tokens_in: float | None = None  # prompt tokens it took in
    served: dict[str, float] = field(default_factory=dict)  # served model name → output tokens
    cap_sums: CapSums | None = None
    power_cap: CapWhatIf | None = None  # with --power-cap

    @property
    def j_per_token_out(self) -> float | None:
        return self.energy_j / self.tokens_out if self.tokens_out else None

    @property
    def usd_per_mtok_out(self) -> float | None:
        """Dollars per million output tokens, on the GPU-hours it used (held), not requested."""
        return self.allocated_h * self.price / self.tokens_out * 1e6 if self.tokens_out and self.price is not None else None

    @property
    def allocated_h(self) -> float:
        return self.hours[PROD] + self.hours[LOW] + self.hours[IDLE] + (self.hours[GAP] if self.pod else 0.0)

    @property
    def wasted_usd(self) -> float:
        return sum(v or 0.0 for k, v in self.usd.items() if k in (IDLE, LOW, UNALLOC)) + (
            (self.sizing.usd_saved or 0.0) if self.sizing and self.reason == "OVERSIZED" else 0.0)


@dataclass
class ModelTotal:
    """One served model (vLLM's ``model_name``) over the pods that served it: energy, tokens, dollars per token.
    A pod serving several models gives each its share of its GPUs by output tokens."""

    model: str
    namespaces: list[str]
    pods: int
    gpu_h: float  # the GPU-hours its pods held (used, not requested)
    energy_j: float  # all the energy its GPUs drew while its pods held them: idle time is paid by the tokens
    idle_energy_j: float  # of it, at steps its pods generated no token
    tokens_out: float
    tokens_in: float
    usd: float | None
    power_cap: CapWhatIf | None = None  # with --power-cap: over all its pods' GPUs
    # prefill's own energy per input token and decode's per output token, fitted over the steps (prefill.py);
    # None, with the reason in prefill_note, where prompts and generations cannot be told apart
    j_per_token_in: float | None = None
    j_per_token_out_decode: float | None = None
    prefill_note: str | None = None

    @property
    def j_per_token_out(self) -> float | None:
        return self.energy_j / self.tokens_out if self.tokens_out else None

    @property
    def usd_per_mtok_out(self) -> float | None:
        return self.usd / self.tokens_out * 1e6 if self.tokens_out and self.usd is not None else None


@dataclass
class NamespaceTotal:
    namespace: str
    pods: int
    gpus: int
    hours: dict[str, float]
    usd: dict[str, float | None]
    savings_usd: float | None
    energy_j: float = 0.0  # its pods' GPUs' energy
    tokens_out: float | None = None  # output tokens of its pods with token counters (None: none has)
    served_energy_j: float = 0.0  # the energy of those pods alone (the numerator of J per output token)

    @property
    def j_per_token_out(self) -> float | None:
        return self.served_energy_j / self.tokens_out if self.tokens_out else None


@dataclass
class Ledger:
    window: FleetWindow
    workloads: list[Workload]  # top offenders first
    namespaces: list[NamespaceTotal]
    totals: dict[str, float]  # hours by class
    totals_usd: dict[str, float | None]
    prices: dict[str, float | None]  # model → USD per GPU-hour used (None: unpriced)
    price_source: str
    notes: list[str]
    found: list[str]  # what the history was found to be, said once: its cadence, its owner labels, shared GPUs
    gaps: list[GpuGap]
    unmatched_requests: list[str]  # pods that requested GPUs but no GPU series names them
    summary_by_reason: dict[tuple[str, str], tuple[float, float | None]]  # (namespace, class) → GPU-h, USD
    models: list[ModelTotal] = field(default_factory=list)  # served models, most energy first
    energy_j: float = 0.0  # every GPU's energy in the window, held or not
    power_cap_w: float | None = None  # the what-if's cap (--power-cap), None without one
