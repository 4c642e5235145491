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
spans (so an admin can see when), a sizing recommendation (``ledger/analysis/sizing.py``) and dollars at its
card's price. Here the ledger is assembled (``LedgerBuilder``: rows, namespaces, totals, what was found, notes); one GPU's
fold is ``fold.py``, its energy ``energy.py``, the served models' tokens ``tokens.py``, the types ``model.py``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from gpusleuth.ledger.analysis.fold import gpu_usage
from gpusleuth.ledger.analysis.model import (CLASSES, IDLE, LOW, MAX_SPANS, PROD, UNALLOC, GpuGap, IdleSpan, Ledger,
                                             NamespaceTotal, Pricing, Usage, Workload)
from gpusleuth.ledger.analysis.power_cap import CapSums, what_if
from gpusleuth.ledger.analysis.sizing import Sizing, recommend
from gpusleuth.ledger.analysis.tokens import model_totals, pod_tokens
from gpusleuth.ledger.run.fleet_usage import FleetWindow, GpuSeries, Owner


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
        self._gen_steps, self._prompt_steps, self._tokens = pod_tokens(window)
        self._pod_energy: dict[tuple[str, str], np.ndarray] = {}  # per pod with token counters: joules per step

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
                if u.energy_steps is not None and u.owner is not None:
                    pod = (u.owner.namespace, u.owner.pod)
                    prev = self._pod_energy.get(pod)
                    self._pod_energy[pod] = u.energy_steps if prev is None else prev + u.energy_steps
                    u.energy_steps = None
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
                      unmatched_requests=unmatched, summary_by_reason=dict(summary), models=model_totals(workloads, self.power_cap_w, self._fit_steps(), w.step_s),
                      energy_j=self._energy_j, power_cap_w=self.power_cap_w)

    def _fit_steps(self) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per pod with token counters: (its GPUs' joules, its prompt tokens, its output tokens) per step."""
        return {pod: (e, self._prompt_steps[pod], self._gen_steps[pod]) for pod, e in self._pod_energy.items()
                if pod in self._prompt_steps and pod in self._gen_steps}

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
