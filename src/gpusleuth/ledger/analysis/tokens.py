"""Energy per token: an inference engine's token counters per pod (output tokens per step: the steps it generated
none are its GPUs' idle energy), and per served model its pods' GPU-hours, energy, tokens and dollars — a pod
serving several models gives each its share by output tokens."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpusleuth.ledger.analysis.energy import counter_increase
from gpusleuth.ledger.analysis.model import ModelTotal, Workload
from gpusleuth.ledger.analysis.power_cap import CapSums, what_if
from gpusleuth.ledger.run.fleet_usage import FleetWindow

PodKey = tuple[str, str]  # (namespace, pod)


def pod_tokens(window: FleetWindow) -> tuple[dict[PodKey, np.ndarray], dict[PodKey, tuple[float, float, dict[str, float]]]]:
    """Per (namespace, pod): its output tokens per step (all its models), and its output tokens, prompt tokens and
    output tokens by model over the window."""
    gen_steps: dict[PodKey, np.ndarray] = {}
    tokens: dict[PodKey, tuple[float, float, dict[str, float]]] = {}
    for pt in window.tokens:
        gen, _ = counter_increase(pt.generated)
        prompt, _ = counter_increase(pt.prompt)
        key = (pt.namespace, pt.pod)
        prev = gen_steps.get(key)
        gen_steps[key] = gen if prev is None else np.where(np.isnan(prev), gen, prev + np.nan_to_num(gen))
        out, inp, by = tokens.get(key, (0.0, 0.0, {}))
        by[pt.model] = by.get(pt.model, 0.0) + float(np.nansum(gen))
        tokens[key] = (out + float(np.nansum(gen)), inp + float(np.nansum(prompt)), by)
    return gen_steps, tokens


def model_totals(workloads: list[Workload], power_cap_w: float | None) -> list[ModelTotal]:
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
                         what_if(m["cap"], power_cap_w) if m["cap"] is not None and power_cap_w else None)
              for model, m in acc.items()]
    return sorted(models, key=lambda m: (-m.energy_j, m.model))
