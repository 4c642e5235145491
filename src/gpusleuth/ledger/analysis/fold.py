"""One GPU's history folded into per-owner usage: ``gpu_usage(series) -> ([Usage], GpuGap | None)``. Each grid step
is classed (productive, low activity, allocated idle, unallocated, no data: ``ledger.py``), a time-sliced GPU's
step split evenly between the pods sharing it, a gap given to whoever held the GPU before it. It sees one GPU
at a time, so memory stays bounded."""

from __future__ import annotations

import math

import numpy as np

from gpusleuth.ledger.analysis.energy import step_energy
from gpusleuth.ledger.analysis.model import (CLASSES, GAP, IDLE, IDLE_MAX, LOW, LOW_MAX, MAX_SPANS, MIN_SPAN_S, PROD,
                                             UNALLOC, GpuGap, Usage)
from gpusleuth.ledger.analysis.power_cap import CapSums
from gpusleuth.ledger.analysis.sizing import mig_slices
from gpusleuth.ledger.run.fleet_usage import GpuSeries


def _spans(mask: np.ndarray, t0: int, step: int) -> list[tuple[int, int]]:
    """Runs of True as [start, end) seconds."""
    if not mask.any():
        return []
    d = np.diff(np.r_[0, mask.astype(np.int8), 0])
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    return [(t0 + int(a) * step, t0 + int(b) * step) for a, b in zip(starts, ends)]


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
    energy, energy_source, resets = step_energy(c["energy_mj"], c["power_w"], step)
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
            energy_j=joules, idle_energy_j=idle_j, energy_source=energy_source, energy_resets=resets, cap=cap,
            energy_steps=np.where(mine, w * energy * share, 0.0) if gen is not None else None))
    return out, gpu_gap
