"""``fleet --prometheus``: the GPU ledger report and its JSON contract.

ledger/pipeline.py runs the pass: ledger/sources/prom_fleet.py fetches (chunked, cached) → ledger/analysis/ledger.py
folds GPUs a batch at a time → :class:`LedgerReport`, which every renderer (console, JSON, CSV, HTML, the Grafana summary) formats and
none recomputes. ``to_dict`` is the versioned JSON (schema ``gpusleuth.ledger/1``); ``rows`` is the flat
per-workload table the CSV writes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from gpusleuth.ledger.analysis.model import CLASSES, REASONS, Ledger, Workload
from gpusleuth.ledger.analysis.power_cap import CapWhatIf

SCHEMA = "gpusleuth.ledger/1"
__all__ = ["CLASSES", "REASONS", "LedgerReport"]


@dataclass
class LedgerReport:
    ledger: Ledger
    elapsed_s: float
    queries: int
    survey_queries: int = 0  # of the queries, the survey's (cadence, owner labels): asked even when all is cached

    @property
    def window(self) -> Any:  # the ledger's FleetWindow (the run model stays behind the analysis)
        return self.ledger.window

    def rows(self) -> list[dict[str, Any]]:
        return [_row(w) for w in self.ledger.workloads]

    def to_dict(self) -> dict[str, Any]:
        lg, w = self.ledger, self.ledger.window
        return {
            "schema": SCHEMA,
            "server": w.server, "start": _iso(w.start_s), "end": _iso(w.end_s), "step_s": w.step_s,
            "step_from": "--step" if w.step_given else "cadence",
            "cadence": {str(sec): n for sec, n in w.cadence.items()}, "owner_labels": w.conventions,
            "window_s": w.end_s - w.start_s,
            "gpus": w.gpus, "metrics": w.metrics, "kube_requests": w.has_kube_requests, "cache": w.cache,
            "price_source": lg.price_source, "prices": lg.prices,
            "totals": {"hours": _r(lg.totals), "usd": _r(lg.totals_usd), "energy_j": round(lg.energy_j, 1)},
            "namespaces": [{"namespace": n.namespace, "pods": n.pods, "gpus": n.gpus, "hours": _r(n.hours),
                            "usd": _r(n.usd), "sizing_savings_usd": _num(n.savings_usd), "energy_j": round(n.energy_j, 1),
                            "tokens_out": _num(n.tokens_out), "j_per_token_out": _num(n.j_per_token_out)}
                           for n in lg.namespaces],
            "models": [{"model": m.model, "namespaces": m.namespaces, "pods": m.pods, "gpu_h": round(m.gpu_h, 4),
                        "energy_j": round(m.energy_j, 1), "idle_energy_j": round(m.idle_energy_j, 1),
                        "energy_kwh": round(m.energy_j / 3.6e6, 4), "idle_energy_kwh": round(m.idle_energy_j / 3.6e6, 4),
                        "tokens_out": m.tokens_out, "tokens_in": m.tokens_in, "usd": _num(m.usd),
                        "j_per_token_out": _num(m.j_per_token_out), "usd_per_mtok_out": _num(m.usd_per_mtok_out),
                        "j_per_token_in": _num(m.j_per_token_in), "j_per_token_out_decode": _num(m.j_per_token_out_decode),
                        "prefill_note": m.prefill_note, "power_cap": _cap(m.power_cap)}
                       for m in lg.models],
            "power_cap_w": lg.power_cap_w,
            "workloads": [{**_row(wl), "hours": _r(wl.hours), "usd": _r(wl.usd), "power_cap": _cap(wl.power_cap),
                           "idle_spans": [{"uuid": s.uuid, "host": s.host, "start": _iso(s.start_s),
                                           "end": _iso(s.end_s), "hours": round(s.hours, 3)} for s in wl.idle_spans]}
                          for wl in lg.workloads],
            "summary_by_reason": [{"namespace": ns, "class": c, "gpu_hours": round(h, 4), "usd": _num(u)}
                                  for (ns, c), (h, u) in sorted(lg.summary_by_reason.items())],
            "gaps": [{"uuid": g.uuid, "host": g.host, "hours": round(g.seconds / 3600, 4),
                      "longest": [_iso(g.longest[0]), _iso(g.longest[1])]} for g in lg.gaps],
            "found": lg.found, "notes": lg.notes, "elapsed_s": round(self.elapsed_s, 2), "queries": self.queries,
        }


def _row(wl: Workload) -> dict[str, Any]:
    s = wl.sizing
    return {
        "workload": wl.key, "namespace": wl.namespace, "pod": wl.pod, "container": wl.container,
        "group": wl.group, "model": wl.model, "card": wl.card, "gpus": wl.gpus, "reason": wl.reason,
        "reason_text": REASONS[wl.reason],
        "allocated_h": round(wl.allocated_h, 4), **{f"{c}_h": round(wl.hours[c], 4) for c in CLASSES},
        "price_per_gpu_hour": wl.price, "allocated_usd": _num(None if wl.price is None else wl.allocated_h * wl.price),
        "idle_usd": _num(wl.usd["allocated_idle"]), "low_usd": _num(wl.usd["low_activity"]),
        "unallocated_usd": _num(wl.usd["unallocated"]), "wasted_usd": _num(wl.wasted_usd if wl.price else None),
        "mem_p99_gib": _num(wl.mem_p99_mib / 1024), "card_gib": _num(wl.card_mib / 1024),
        "activity_p95": _num(wl.activity_p95), "activity_source": wl.activity_source,
        "requested_gpus": wl.requested_gpus, "requested_h": _num(wl.requested_hours),
        "sizing": None if s is None else s.kind, "sizing_target": None if s is None else s.target,
        "sizing_saved_h": None if s is None else round(s.hours_saved, 4),
        "sizing_saved_usd": None if s is None else _num(s.usd_saved),
        "sizing_floor_gib": None if s is None else round(s.need_mib / 1024, 3),
        "sizing_offer_gib": None if s is None else round(s.target_mib / 1024, 3),
        "sizing_risk": None if s is None else s.risk,
        "shared_h": round(wl.shared_h, 4), "shared_with": wl.shared_with,
        "energy_j": round(wl.energy_j, 1), "idle_energy_j": _num(wl.idle_energy_j),
        "tokens_out": _num(wl.tokens_out), "tokens_in": _num(wl.tokens_in),
        "served_models": " ".join(sorted(wl.served)), "j_per_token_out": _num(wl.j_per_token_out),
        "usd_per_mtok_out": _num(wl.usd_per_mtok_out),
        "power_cap_text": wl.power_cap.text if wl.power_cap else None,
        "hosts": " ".join(wl.hosts),
    }


def _cap(c: CapWhatIf | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"cap_w": c.cap_w, "state": c.state, "max_w": _num(c.max_w), "bound_j": round(c.bound_j, 1),
            "saved_j": _num(c.saved_j), "saved_j_range": None if c.saved_j_range is None else [round(x, 1) for x in c.saved_j_range],
            "added_s": _num(c.added_s), "added_s_range": None if c.added_s_range is None else [round(x, 1) for x in c.added_s_range],
            "fit": c.fit, "text": c.text}


def _num(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), 4)


def _r(d: dict[str, Any]) -> dict[str, Any]:
    return {k: _num(v) for k, v in d.items()}


def _iso(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
