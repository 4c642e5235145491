"""The GPU ledger: where a cluster's GPU-hours went, per namespace and pod, with reason codes and dollars.

Every grid step of every GPU is one of:

- ``productive``: a pod holds the GPU and it is active (SM activity ≥ ``LOW_MAX``);
- ``low_activity``: a pod holds it and it does a little (between ``IDLE_MAX`` and ``LOW_MAX``);
- ``allocated_idle``: a pod holds it and nothing runs on it (activity < ``IDLE_MAX``);
- ``unallocated``: no pod holds it (dcgm-exporter's pod label is empty);
- ``no_data``: inside the GPU's life but the server has no sample (exporter down, scrape failing): neither
  idle nor busy, said as a gap rather than guessed.

Activity is DCGM's SM activity (``DCGM_FI_PROF_SM_ACTIVE``: the share of SM time with a warp resident)
where the profiling metrics are on, else the graphics engine's (``DCGM_FI_PROF_GR_ENGINE_ACTIVE``: a MIG
instance's own, which has no GPU_UTIL), else ``DCGM_FI_DEV_GPU_UTIL`` / 100 (share of time any kernel ran:
coarser, a tiny kernel reads 100 %). A time-sliced GPU (several pods holding it at once) is counted once, each
step's seconds split evenly between the pods sharing it: dcgm-exporter gives each the device's values, so
nothing tells their shares apart. A workload's row carries the reason that cost it most, its idle
spans (so an admin can see when), a sizing recommendation (``analysis/sizing.py``) and dollars at its
card's price. The fold (:func:`gpu_usage`) sees one GPU at a time, so memory stays bounded.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpusleuth.analysis.cost import PRICES_DATE, price_table
from gpusleuth.analysis.peaks import lookup_peak
from gpusleuth.analysis.power_cap import CapSums, CapWhatIf, what_if
from gpusleuth.analysis.sizing import Sizing, mig_slices, recommend
from gpusleuth.run.fleet_usage import FleetWindow, GpuSeries, Owner

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


@dataclass
class GpuGap:
    uuid: str
    host: str
    seconds: float
    longest: tuple[int, int]


def _spans(mask: np.ndarray, t0: int, step: int) -> list[tuple[int, int]]:
    """Runs of True as [start, end) seconds."""
    if not mask.any():
        return []
    d = np.diff(np.r_[0, mask.astype(np.int8), 0])
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    return [(t0 + int(a) * step, t0 + int(b) * step) for a, b in zip(starts, ends)]


def counter_increase(v: np.ndarray) -> tuple[np.ndarray, int]:
    """Per-step increase of a counter on the grid (NaN: no sample), and how many resets it had. As Prometheus'
    ``increase`` reads a counter: a value below the one before is a restart from zero, so that step gained the
    value itself (what accrued between the last sample and the restart is lost). An increase across a gap of k
    steps is spread evenly over them; steps before the first sample or after the last are NaN."""
    out = np.full(len(v), np.nan)
    k = np.flatnonzero(~np.isnan(v))
    if len(k) < 2:
        return out, 0
    x = v[k].astype(np.float64)
    d = np.diff(x)
    reset = d < 0
    d = np.where(reset, x[1:], d)
    steps = np.arange(k[0] + 1, k[-1] + 1)
    seg = np.searchsorted(k, steps, side="left") - 1  # step s in (k[i], k[i+1]] gains d[i] / (k[i+1] - k[i])
    out[steps] = (d / np.diff(k))[seg]
    return out, int(reset.sum())


def gpu_usage(s: GpuSeries, generating: dict[tuple[str, str], np.ndarray] | None = None,
              power_cap_w: float | None = None) -> tuple[list[Usage], GpuGap | None]:
    """Fold one GPU's samples into per-owner usage, and the gaps in its data. ``generating`` is, per (namespace,
    pod) with inference-engine token counters, whether it generated tokens at each step (idle energy is the
    rest)."""
    c, step = s.columns, s.step_s
    # a MIG instance is its slices' share of the card: its seconds are GPU-seconds at that share
    slices = mig_slices(s.model, s.mig_profile) if s.mig_profile else None
    share = slices[0] / 7 if slices else 1.0
    sm, util, gr = c["sm_active"], c["util"], c["gr_active"]
    # energy per step, J: the counter's increase where it has one, else power × step (the power integral)
    counted, resets = counter_increase(c["energy_mj"])
    energy = np.where(np.isnan(counted), c["power_w"].astype(np.float64) * step, counted / 1000.0)
    energy_source = ("counter" if not np.isnan(counted).all() else "") + (
        "power" if (np.isnan(counted) & ~np.isnan(c["power_w"])).any() else "")
    have = np.zeros(len(s), bool)
    for v in c.values():
        have |= ~np.isnan(v)
    if not have.any():
        return [], None
    life = slice(int(np.argmax(have)), len(have) - int(np.argmax(have[::-1])))
    activity = np.where(np.isnan(sm), np.where(np.isnan(gr), util / 100.0, gr), sm)
    owner = s.owner.copy()
    gap = ~have
    gap[: life.start] = False
    gap[life.stop:] = False
    # a gap belongs to whoever held the GPU before it (the pod did not stop paying for the GPU)
    if gap.any():
        idx = np.where(have, np.arange(len(owner)), 0)
        np.maximum.accumulate(idx, out=idx)
        owner = np.where(gap, owner[idx], owner)
    gpu_gap = None
    if gap.any():
        spans = _spans(gap, s.start_s, step)
        longest = max(spans, key=lambda ab: ab[1] - ab[0])
        gpu_gap = GpuGap(s.uuid, s.host, float(gap.sum() * step), longest)
    total_mib = c["fb_used_mib"] + c["fb_free_mib"]
    card = float(np.nanmedian(total_mib)) if np.isfinite(total_mib).any() else math.nan
    out: list[Usage] = []
    known = have & ~np.isnan(activity)
    # each pod's weight per step: 1 when it held the GPU alone, 1/n when n pods shared it (time-slicing)
    held = np.unique(owner[life])
    weights: dict[int, np.ndarray] = {}
    sharers = np.zeros(len(owner), np.int32)
    for h in held:
        if h >= 0:
            sharers[owner == h] = len(s.holder(int(h)))
    for h in held:
        at = owner == h
        for oid in (s.holder(int(h)) if h >= 0 else (-1,)):
            w = weights.setdefault(oid, np.zeros(len(owner)))
            w[at] = 1.0 / sharers[at] if h >= 0 else 1.0
    # sharing for a single step is a handover (the old pod's last sample and the new one's first in one step, when the
    # step is coarser than the device's cadence): split like sharing, but not said to be time-slicing
    sliced = np.zeros(len(owner), bool)
    for a0, b0 in _spans(sharers > 1, 0, 1):
        if b0 - a0 >= 2:
            sliced[a0:b0] = True
    for oid, w in weights.items():
        mine = w > 0
        valid = mine & known
        o = s.owners[oid] if oid >= 0 else None
        secs = dict.fromkeys(CLASSES, 0.0)
        secs[GAP] = float(w[mine & gap].sum() * step * share)
        a = activity[valid]
        wa = w[valid] * step * share
        if o is None:
            secs[UNALLOC] = float(wa.sum())
        else:
            secs[IDLE] = float(wa[a < IDLE_MAX].sum())
            secs[LOW] = float(wa[(a >= IDLE_MAX) & (a < LOW_MAX)].sum())
            secs[PROD] = float(wa[a >= LOW_MAX].sum())
        mem = c["fb_used_mib"][mine & have]
        mem = mem[~np.isnan(mem)]
        src = np.where(~np.isnan(sm[valid]), 0, np.where(~np.isnan(gr[valid]), 1, 2))
        kinds = set(src.tolist())
        source = ("sm_active", "gr_active", "util")[kinds.pop()] if len(kinds) == 1 else "mixed" if kinds else "sm_active"
        together = mine & sliced
        idle_mask = mine & known & (activity < IDLE_MAX) if o is not None else mine & known
        spans = [sp for sp in _spans(idle_mask, s.start_s, step) if sp[1] - sp[0] >= MIN_SPAN_S]
        joules = float(np.nansum(w[mine] * energy[mine]) * share)
        gen = generating.get((o.namespace, o.pod)) if generating and o is not None else None
        idle_j = float(np.nansum((w * energy)[mine & (gen == 0)]) * share) if gen is not None else None
        cap = None
        if power_cap_w is not None and o is not None:
            cap = CapSums()
            cap.add(c["power_w"][mine & have], c["sm_clock_mhz"][mine & have], w[mine & have] * step * share, power_cap_w)
        tensor = c["tensor_active"][valid]
        tensor = tensor[~np.isnan(tensor)]
        out.append(Usage(
            uuid=s.uuid, host=s.host, model=s.model, owner=o, seconds=secs,
            mem_p99_mib=float(np.percentile(mem, 99)) if len(mem) else math.nan,
            mem_max_mib=float(mem.max()) if len(mem) else math.nan, card_mib=card,
            activity_p95=float(np.percentile(a, 95)) if len(a) else math.nan, activity_source=source,
            mig_profile=s.mig_profile,
            tensor_mean=float(tensor.mean()) if len(tensor) else math.nan,
            idle_spans=sorted(spans, key=lambda ab: ab[0] - ab[1])[:MAX_SPANS],
            shared_s=float(w[together].sum() * step * share) if o is not None else 0.0,
            shared_with=int(sharers[together].max()) if together.any() and o is not None else 0,
            energy_j=joules, idle_energy_j=idle_j, energy_source=energy_source, energy_resets=resets, cap=cap))
    return out, gpu_gap


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


def _reason(hours: dict[str, float], sizing: Sizing | None, owned: bool) -> str:
    if not owned:
        return "UNALLOCATED"
    alloc = hours[PROD] + hours[LOW] + hours[IDLE]
    if alloc <= 0:
        return "PRODUCTIVE"
    if hours[IDLE] >= 0.9 * alloc:
        return "IDLE_ALLOCATED"
    if hours[IDLE] >= 0.2 * alloc:
        return "PART_TIME"
    if hours[LOW] >= 0.5 * alloc:
        return "LOW_ACTIVITY"
    if sizing is not None:
        return "OVERSIZED"
    return "PRODUCTIVE"


class LedgerBuilder:
    """Feed GPUs (``add``) a batch at a time, then ``finish``: per-pod rows, namespaces, totals, notes."""

    def __init__(self, window: FleetWindow, pricing: Pricing, power_cap_w: float | None = None):
        self.window, self.pricing, self.power_cap_w = window, pricing, power_cap_w
        self.price_for: dict[str, float | None] = {}
        self._by_key: dict[str, list[Usage]] = defaultdict(list)
        self._gaps: list[GpuGap] = []
        self._sources: set[str] = set()
        self._owned_samples = 0.0
        self._gpus = 0
        self._shared_gpus = 0
        self._shared_s = 0.0
        self._sharing_pods: set[str] = set()
        self._energy_sources: set[str] = set()
        self._held_pods: set[tuple[str, str]] = set()
        self._energy_resets = 0
        self._energy_j = 0.0
        # per (namespace, pod): output tokens per step (all its models), prompt tokens, output tokens by model
        self._gen_steps: dict[tuple[str, str], np.ndarray] = {}
        self._tokens: dict[tuple[str, str], tuple[float, float, dict[str, float]]] = {}
        for pt in window.tokens:
            gen, _ = counter_increase(pt.generated)
            prompt, _ = counter_increase(pt.prompt)
            key = (pt.namespace, pt.pod)
            prev = self._gen_steps.get(key)
            self._gen_steps[key] = gen if prev is None else np.where(np.isnan(prev), gen, prev + np.nan_to_num(gen))
            out, inp, by = self._tokens.get(key, (0.0, 0.0, {}))
            by[pt.model] = by.get(pt.model, 0.0) + float(np.nansum(gen))
            self._tokens[key] = (out + float(np.nansum(gen)), inp + float(np.nansum(prompt)), by)

    def add(self, series: list[GpuSeries]) -> None:
        for s in series:
            usages, gap = gpu_usage(s, self._gen_steps, self.power_cap_w)
            if usages:
                self._gpus += 1
            if any(u.shared_s > 0 for u in usages):
                self._shared_gpus += 1
            if gap is not None:
                self._gaps.append(gap)
            for u in usages:
                self._energy_j += u.energy_j
                self._energy_resets += u.energy_resets if u is usages[0] else 0
                if u.energy_source:
                    self._energy_sources.add(u.energy_source)
                key = u.owner.name if u.owner is not None else f"(no pod) {u.host} {u.uuid}"
                if u.owner is not None:
                    self._owned_samples += sum(u.seconds.values())
                    self._held_pods.add((u.owner.namespace, u.owner.pod))
                    if u.shared_s > 0:
                        self._shared_s += u.shared_s
                        self._sharing_pods.add(u.owner.name)
                    if u.owner.group and u.owner.pod and self.window.group_label:
                        key = f"{u.owner.group} · {key}"
                self._by_key[key].append(u)
                self._sources.add(u.activity_source)

    def finish(self) -> Ledger:
        w = self.window
        workloads = [self._workload(k, us) for k, us in self._by_key.items()]
        requested = {(r.namespace, r.pod): r for r in w.requests}
        seen = set()
        for wl in workloads:
            r = requested.get((wl.namespace, wl.pod))
            if r is not None:
                seen.add((wl.namespace, wl.pod))
                wl.requested_gpus = r.gpus
                wl.requested_hours = r.gpus * r.samples * w.step_s / 3600
        unmatched = [f"{ns}/{pod} requested {r.gpus:g} GPU(s) for {r.samples * w.step_s / 3600:.1f} h"
                     for (ns, pod), r in requested.items() if (ns, pod) not in seen and r.gpus > 0]
        workloads.sort(key=lambda x: (-x.wasted_usd, -(x.hours[IDLE] + x.hours[LOW] + x.hours[UNALLOC]), x.key))
        totals = {c: sum(wl.hours[c] for wl in workloads) for c in CLASSES}
        totals_usd = {c: _sum_or_none([wl.usd[c] for wl in workloads]) for c in CLASSES}
        namespaces = self._namespaces(workloads)
        summary: dict[tuple[str, str], tuple[float, float | None]] = {}
        for wl in workloads:
            for c, h in wl.hours.items():
                if h > 0:
                    h0, u0 = summary.get((wl.namespace or "(none)", c), (0.0, None))
                    u = wl.usd[c]
                    summary[(wl.namespace or "(none)", c)] = (h0 + h, u0 if u is None else (u0 or 0.0) + u)
        return Ledger(window=w, workloads=workloads, namespaces=namespaces, totals=totals, totals_usd=totals_usd,
                      prices=dict(self.price_for), price_source=self.pricing.source,
                      notes=w.notes + self._notes(unmatched), found=self._found(), gaps=sorted(self._gaps, key=lambda g: -g.seconds),
                      unmatched_requests=unmatched, summary_by_reason=dict(summary), models=self._models(workloads),
                      energy_j=self._energy_j, power_cap_w=self.power_cap_w)

    def _workload(self, key: str, us: list[Usage]) -> Workload:
        o = us[0].owner
        hours = {c: sum(u.seconds[c] for u in us) / 3600 for c in CLASSES}
        model = max({u.model for u in us}, key=lambda m: sum(sum(u.seconds.values()) for u in us if u.model == m))
        price = self.price_for.setdefault(model, self.pricing.per_gpu_hour(model))
        usd = {c: (h * price if price is not None else None) for c, h in hours.items()}
        mem = [u.mem_p99_mib for u in us if not math.isnan(u.mem_p99_mib)]
        act = [u.activity_p95 for u in us if not math.isnan(u.activity_p95)]
        cards = [u.card_mib for u in us if not math.isnan(u.card_mib)]
        mem_p99 = max(mem) if mem else math.nan
        act_p95 = max(act) if act else math.nan
        card = min(cards) if cards else math.nan
        gpus = len({u.uuid for u in us})
        sizing = None
        profiles = {u.mig_profile for u in us}  # several MIG shapes under one pod: no single advice
        busy_h = hours[PROD] + hours[LOW]
        if o is not None and len(profiles) == 1 and busy_h > 0 and hours[IDLE] < 0.2 * (busy_h + hours[IDLE]):
            sizing = recommend(model, card, mem_p99, act_p95, gpus, hours[PROD] + hours[LOW] + hours[IDLE],
                               price, self.pricing.table, self.pricing.tflops(model),
                               mig_profile=profiles.pop())
        spans = sorted((IdleSpan(u.uuid, u.host, a, b) for u in us for a, b in u.idle_spans),
                       key=lambda sp: -(sp.end_s - sp.start_s))[:MAX_SPANS]
        sources = {u.activity_source for u in us}
        shared = [u for u in us if u.shared_s > 0]
        return Workload(key=key, namespace=o.namespace if o else "", pod=(o.pod or o.group) if o else "",
                        container=o.container if o else "", group=o.group if o else "", model=model, gpus=gpus,
                        hours=hours, price=price, usd=usd, reason=_reason(hours, sizing, o is not None),
                        mem_p99_mib=mem_p99, card_mib=card, activity_p95=act_p95,
                        activity_source=sources.pop() if len(sources) == 1 else "mixed", idle_spans=spans,
                        sizing=sizing, hosts=sorted({u.host for u in us}), card=self.pricing.card(model),
                        uuids=sorted({u.uuid for u in us}), shared_h=sum(u.shared_s for u in shared) / 3600,
                        shared_with=max((u.shared_with for u in shared), default=0),
                        energy_j=sum(u.energy_j for u in us),
                        idle_energy_j=_sum_or_none([u.idle_energy_j for u in us]),
                        **self._token_fields(o), **self._cap_fields(us))

    def _cap_fields(self, us: list[Usage]) -> dict[str, Any]:
        if self.power_cap_w is None or all(u.cap is None for u in us):
            return {}
        sums = CapSums()
        for u in us:
            if u.cap is not None:
                sums.merge(u.cap)
        return {"cap_sums": sums, "power_cap": what_if(sums, self.power_cap_w)}

    def _token_fields(self, o: Owner | None) -> dict[str, Any]:
        got = self._tokens.get((o.namespace, o.pod)) if o is not None else None
        if got is None:
            return {}
        out, inp, by = got
        return {"tokens_out": out, "tokens_in": inp, "served": dict(by)}

    def _models(self, workloads: list[Workload]) -> list[ModelTotal]:
        """Per served model: its pods' GPU-hours, energy and tokens (a pod serving several split by output tokens)."""
        acc: dict[str, dict[str, Any]] = {}
        for wl in workloads:
            if not wl.served:
                continue
            total = sum(wl.served.values())
            for model, out in wl.served.items():
                f = out / total if total else 1 / len(wl.served)
                m = acc.setdefault(model, {"ns": set(), "pods": 0, "h": 0.0, "j": 0.0, "idle": 0.0, "out": 0.0,
                                           "in": 0.0, "usd": None, "cap": None})
                if wl.cap_sums is not None:  # a pod's GPUs whole: the physics is the card's, not a share of it
                    m["cap"] = m["cap"] or CapSums()
                    m["cap"].merge(wl.cap_sums)
                m["ns"].add(wl.namespace)
                m["pods"] += 1
                m["h"] += wl.allocated_h * f
                m["j"] += wl.energy_j * f
                m["idle"] += (wl.idle_energy_j or 0.0) * f
                m["out"] += out
                m["in"] += (wl.tokens_in or 0.0) * f
                if wl.price is not None:
                    m["usd"] = (m["usd"] or 0.0) + wl.allocated_h * f * wl.price
        models = [ModelTotal(model, sorted(m["ns"]), m["pods"], m["h"], m["j"], m["idle"], m["out"], m["in"], m["usd"],
                             what_if(m["cap"], self.power_cap_w) if m["cap"] is not None and self.power_cap_w else None)
                  for model, m in acc.items()]
        return sorted(models, key=lambda m: (-m.energy_j, m.model))

    def _namespaces(self, workloads: list[Workload]) -> list[NamespaceTotal]:
        by: dict[str, list[Workload]] = defaultdict(list)
        for wl in workloads:
            if wl.pod:
                by[wl.namespace].append(wl)
        out = []
        for ns, wls in by.items():
            hours = {c: sum(x.hours[c] for x in wls) for c in CLASSES}
            usd = {c: _sum_or_none([x.usd[c] for x in wls]) for c in CLASSES}
            saved = _sum_or_none([x.sizing.usd_saved for x in wls if x.sizing is not None])
            gpus = len({u for x in wls for u in x.uuids})
            served = [x for x in wls if x.tokens_out is not None]
            out.append(NamespaceTotal(ns, len(wls), gpus, hours, usd, saved, energy_j=sum(x.energy_j for x in wls),
                                      tokens_out=sum(x.tokens_out or 0.0 for x in served) if served else None,
                                      served_energy_j=sum(x.energy_j for x in served)))
        out.sort(key=lambda n: -(n.hours[IDLE] + n.hours[LOW]))
        return out

    def _found(self) -> list[str]:
        """The history as found, one sentence each: how often it was sampled and the step read at, whose labels
        name the pods, and the GPUs pods shared."""
        w, out = self.window, []
        if w.cadence:
            seen = ", ".join(f"{sec} s ({n:,} device{'s' if n != 1 else ''})" for sec, n in w.cadence.items())
            coarsest = max(w.cadence)
            if w.step_given:
                how = f"step {w.step_s} s from --step"
            elif len(w.cadence) > 1:
                how = f"step {w.step_s} s, the coarsest, so every device has a sample in every step"
            elif w.step_s > coarsest:
                how = f"step {w.step_s} s (the last sample of each step)"
            else:
                how = f"step {w.step_s} s"
            out.append(f"cadence: samples every {seen}; {how}")
        elif not w.step_given:
            out.append(f"cadence: no device sampled at the hours counted; step {w.step_s} s, Prometheus' default "
                       "scrape interval")
        said = []
        if "exported" in w.conventions:
            said.append("exported_namespace/exported_pod/exported_container (gpu-operator's ServiceMonitor without "
                        "honorLabels: there namespace/pod name the exporter's own pod, and a GPU without "
                        "exported_pod is unallocated)")
        if "old" in w.conventions:
            said.append("pod_namespace/pod_name/container_name (dcgm-exporter --use-old-namespace; namespace/pod "
                        "there name the exporter's own pod)")
        if "pod" in w.conventions:
            said.append("namespace/pod/container (dcgm-exporter's Kubernetes mode)")
        if "hpc_job" in w.conventions:
            said.append("hpc_job (dcgm-exporter's HPC job mapping, e.g. Slurm)"
                        + (" — grouped by it" if w.group_label == "hpc_job" else ""))
        if w.group_label and w.group_label != "hpc_job":
            said.append(f"{w.group_label} (--group-label)")
        out.append("owners from " + "; ".join(said) if said else
                   "owners: no pod or job label on any series (every GPU counts as unallocated)")
        if self._shared_gpus:
            out.append(f"time-sliced: {self._shared_gpus} GPU(s) held by several pods at once (dcgm-exporter repeats "
                       f"a shared GPU's series for each pod) are counted once; their {self._shared_s / 3600:,.1f} "
                       f"shared GPU-hours are split evenly between the {len(self._sharing_pods)} pods sharing them, "
                       "as nothing in the series tells their shares apart")
        return out

    def _notes(self, unmatched: list[str]) -> list[str]:
        w, notes = self.window, []
        if self._gpus and self._owned_samples == 0:
            notes.append("no GPU series carries Kubernetes labels (namespace/pod): dcgm-exporter's pod mapping is "
                         "off or cannot see the kubelet — run it with --kubernetes (DCGM_EXPORTER_KUBERNETES=true) "
                         "and mount /var/lib/kubelet/pod-resources; until then every GPU is listed as unallocated "
                         "and allocated-but-idle cannot be told from unallocated")
        if w.cadence and w.step_given and w.step_s < max(w.cadence):
            slow = sum(n for sec, n in w.cadence.items() if sec > w.step_s)
            notes.append(f"--step {w.step_s} is shorter than the {max(w.cadence)} s between the samples of {slow} "
                         "device(s): their steps without a sample count as no data; leave --step out to read the "
                         "history at its own cadence")
        if "util" in self._sources or "mixed" in self._sources:
            notes.append("activity is DCGM_FI_DEV_GPU_UTIL (any kernel running) where DCGM_FI_PROF_SM_ACTIVE is "
                         "missing: enable the DCGM profiling metrics in dcgm-exporter's counters CSV "
                         "(DCGM_FI_PROF_SM_ACTIVE, DCGM_FI_PROF_PIPE_TENSOR_ACTIVE; -f / DCGM_EXPORTER_COLLECTORS) "
                         "for SM activity; low activity is coarser without them")
        if "DCGM_FI_DEV_FB_USED" not in w.metrics:
            notes.append("no DCGM_FI_DEV_FB_USED: framebuffer use is in dcgm-exporter's default counters; without "
                         "it no sizing is recommended (the p99 memory floor is unknown)")
        elif "DCGM_FI_DEV_FB_FREE" not in w.metrics:
            notes.append("no DCGM_FI_DEV_FB_FREE: the card's memory size is unknown, so no sizing is recommended "
                         "(add DCGM_FI_DEV_FB_FREE to dcgm-exporter's counters CSV)")
        if not w.has_kube_requests:
            notes.append('no kube_pod_container_resource_requests{resource="nvidia_com_gpu"}: kube-state-metrics '
                         "(v2+) is not scraped by this server, so GPU requests are not cross-checked; allocation "
                         "comes from dcgm-exporter's pod labels alone")
        if unmatched:
            more = f" (and {len(unmatched) - 5} more)" if len(unmatched) > 5 else ""
            notes.append(f"{len(unmatched)} pod(s) requested GPUs that no dcgm-exporter series names: "
                         + "; ".join(unmatched[:5]) + more)
        if self._energy_sources:
            how = {"counter": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (the energy counter)",
                   "power": "DCGM_FI_DEV_POWER_USAGE × time (the power integral: no energy counter)",
                   "counterpower": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, and DCGM_FI_DEV_POWER_USAGE × time at steps the "
                   "counter gives no increase (a device's first step in the window, or a device without the counter)"}
            src = "counter" if self._energy_sources == {"counter"} else "power" if self._energy_sources == {"power"} \
                else "counterpower"
            resets = (f"; {self._energy_resets} counter reset(s) (driver or exporter restarts) read as restarts from "
                      "zero" if self._energy_resets else "")
            notes.append(f"energy from {how[src]}{resets}")
        idle_tok = sorted(f"{ns}/{pod}" for ns, pod in self._tokens if (ns, pod) not in self._held_pods)
        if idle_tok:
            notes.append(f"{len(idle_tok)} pod(s) with token counters hold no GPU in dcgm-exporter's series, so their "
                         "tokens have no energy or GPU-hours: " + ", ".join(idle_tok[:5])
                         + (f" (and {len(idle_tok) - 5} more)" if len(idle_tok) > 5 else ""))
        if self._gaps:
            total = sum(g.seconds for g in self._gaps) / 3600
            g = self._gaps[0]
            notes.append(f"{len(self._gaps)} GPU(s) have gaps in their samples, {total:,.1f} GPU-hours in all, "
                         f"counted as no_data (neither idle nor busy); the longest: {g.host} {g.uuid} from "
                         f"{_iso(g.longest[0])} to {_iso(g.longest[1])} (exporter down or scrapes failing; gaps "
                         "shorter than one step are not seen)")
        return notes


def _sum_or_none(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) if vals else None


def _iso(t: int) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
