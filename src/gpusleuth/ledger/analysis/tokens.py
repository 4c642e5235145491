"""Energy per token: an inference engine's token counters per pod (output tokens per step: the steps it generated
none are its GPUs' idle energy; prompt tokens per step), and per served model its pods' GPU-hours, energy, tokens
and dollars — a pod serving several models gives each its share by output tokens — and prefill's joules per input
token where they can be told apart (prefill.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpusleuth.ledger.analysis.energy import counter_increase
from gpusleuth.ledger.analysis.model import ModelTotal, Workload
from gpusleuth.ledger.analysis.power_cap import CapSums, what_if
from gpusleuth.ledger.analysis.prefill import split_prefill
from gpusleuth.ledger.run.fleet_usage import FleetWindow

PodKey = tuple[str, str]  # (namespace, pod)


def pod_tokens(window: FleetWindow) -> tuple[dict[PodKey, np.ndarray], dict[PodKey, np.ndarray],
                                             dict[PodKey, tuple[float, float, dict[str, float]]]]:
    """Per (namespace, pod): its output tokens per step and its prompt tokens per step (all its models), and its
    output tokens, prompt tokens and output tokens by model over the window."""
    gen_steps: dict[PodKey, np.ndarray] = {}
    prompt_steps: dict[PodKey, np.ndarray] = {}
    tokens: dict[PodKey, tuple[float, float, dict[str, float]]] = {}
    for pt in window.tokens:
        gen, _ = counter_increase(pt.generated)
        prompt, _ = counter_increase(pt.prompt)
        key = (pt.namespace, pt.pod)
        for steps, v in ((gen_steps, gen), (prompt_steps, prompt)):
            prev = steps.get(key)
            steps[key] = v if prev is None else np.where(np.isnan(prev), v, prev + np.nan_to_num(v))
        out, inp, by = tokens.get(key, (0.0, 0.0, {}))
        by[pt.model] = by.get(pt.model, 0.0) + float(np.nansum(gen))
        tokens[key] = (out + float(np.nansum(gen)), inp + float(np.nansum(prompt)), by)
    return gen_steps, prompt_steps, tokens


def _add(a: np.ndarray | None, b: np.ndarray) -> np.ndarray:
    return b.astype(np.float64) if a is None else a + b  # a step one of them did not see is NaN: left out of the fit


def model_totals(workloads: list[Workload], power_cap_w: float | None,
                 steps: dict[PodKey, tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None,
                 step_s: int = 30) -> list[ModelTotal]:
    """Per served model: its pods' GPU-hours, energy and tokens (a pod serving several split by output tokens), and
    from ``steps`` (per pod: its GPUs' joules, prompt tokens and output tokens per step) prefill's joules per
    input token where they can be told apart from decode's (prefill.py)."""
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
            pod = steps.get((wl.namespace, wl.pod)) if steps else None
            if pod is not None:
                m["steps"] = [_add(m.get("steps", [None] * 3)[i], pod[i] * f) for i in range(3)]
            if wl.price is not None:
                m["usd"] = (m["usd"] or 0.0) + wl.allocated_h * f * wl.price
    models = []
    for model, m in acc.items():
        e, p, g = m.get("steps", (None, None, None))
        split = split_prefill(e, p, g, step_s) if e is not None and p is not None and g is not None else None
        models.append(ModelTotal(model, sorted(m["ns"]), m["pods"], m["h"], m["j"], m["idle"], m["out"], m["in"],
                                 m["usd"], what_if(m["cap"], power_cap_w) if m["cap"] is not None and power_cap_w else None,
                                 j_per_token_in=split.j_per_token_in if split else None,
                                 j_per_token_out_decode=split.j_per_token_out_decode if split else None,
                                 prefill_note=split.note if split else
                                 "no per-step prompt and generation counts: prefill and decode cannot be told apart"))
    return sorted(models, key=lambda m: (-m.energy_j, m.model))
