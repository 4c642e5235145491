"""Right-sizing a workload's GPU from what it used: a MIG profile, a smaller card, MPS/time-slicing, fewer GPUs.

The floor is always the observed p99 framebuffer use plus ``MEM_HEADROOM`` (and ``COMPUTE_HEADROOM`` over
p95 SM activity, as a share of the card's SMs): a recommendation never offers less than that, and its risk
is the margin left above the p99. MIG memory and SM counts are what ``nvidia-smi`` reports for each
instance (H100 80GB and H200 from the captures in shared/fixtures/nvidia-smi, the other sizes from NVIDIA's
MIG user guide tables, where "GB" is GiB). Savings are priced by the share of the card given back (a MIG
slice is 1/7 of the compute) or by the price difference to the smaller card, over the workload's
allocated GPU-hours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

MEM_HEADROOM = 0.20  # over the observed p99 memory
COMPUTE_HEADROOM = 0.25  # over the observed p95 SM activity
MIN_HOURS = 1.0  # fewer allocated hours than this: no recommendation (too little evidence)


@dataclass(frozen=True)
class MigProfile:
    name: str
    slices: int  # compute slices of 7
    sms: int
    mem_mib: int


def _p(name: str, sms: int, gib: float) -> MigProfile:
    return MigProfile(name=name, slices=int(name.split("g.")[0].split(".")[-1]), sms=sms, mem_mib=int(gib * 1024))


# card family (matched on the upper-cased model name, first match wins) → (SMs, profiles smallest first)
MIG_FAMILIES: list[tuple[tuple[str, ...], str, int, list[MigProfile]]] = [
    (("H200",), "H200 141GB", 132, [_p("1g.18gb", 16, 16.0), _p("1g.35gb", 16, 32.5), _p("2g.35gb", 32, 32.5),
                                    _p("3g.71gb", 60, 69.75), _p("4g.71gb", 64, 69.75), _p("7g.141gb", 132, 139.75)]),
    (("H100", "94"), "H100 94GB", 132, [_p("1g.12gb", 16, 10.75), _p("1g.24gb", 16, 21.75), _p("2g.24gb", 32, 21.75),
                                        _p("3g.47gb", 60, 46.0), _p("4g.47gb", 64, 46.0), _p("7g.94gb", 132, 93.0)]),
    (("H100",), "H100 80GB", 132, [_p("1g.10gb", 16, 9.75), _p("1g.20gb", 16, 19.62), _p("2g.20gb", 32, 19.62),
                                   _p("3g.40gb", 60, 39.5), _p("4g.40gb", 64, 39.5), _p("7g.80gb", 132, 79.25)]),
    (("A100", "80"), "A100 80GB", 108, [_p("1g.10gb", 14, 9.75), _p("1g.20gb", 14, 19.62), _p("2g.20gb", 28, 19.62),
                                        _p("3g.40gb", 42, 39.25), _p("4g.40gb", 56, 39.25), _p("7g.80gb", 98, 79.25)]),
    (("A100",), "A100 40GB", 108, [_p("1g.5gb", 14, 4.75), _p("1g.10gb", 14, 9.62), _p("2g.10gb", 28, 9.75),
                                   _p("3g.20gb", 42, 19.62), _p("4g.20gb", 56, 19.62), _p("7g.40gb", 98, 39.25)]),
]

# smaller whole cards: (price-table model, memory MiB, dense bf16 TFLOP/s — analysis/peaks.py's numbers)
CARDS: list[tuple[str, int, float]] = [
    ("T4", 15 * 1024, 65.0), ("L4", 22 * 1024 + 512, 121.0), ("A10G", 22 * 1024 + 512, 70.0),
    ("L40S", 45 * 1024, 362.0), ("A100", 39 * 1024, 312.0), ("H100 SXM", 79 * 1024, 989.0),
]


@dataclass
class Sizing:
    kind: Literal["mig", "smaller_card", "mps", "fewer_gpus"]
    target: str  # "3g.40gb", "L4", "MPS / time-slicing, 1 of 4 shares", "2 GPUs"
    fraction_kept: float  # share of today's spend the recommendation keeps
    hours_saved: float  # GPU-hours given back (GPU-equivalents)
    usd_saved: float | None
    need_mib: float  # p99 memory + headroom: the floor
    target_mib: float  # memory the recommendation offers (≥ need_mib)
    mem_p99_mib: float
    activity_p95: float
    risk: str  # the margin, in words

    @property
    def margin_mib(self) -> float:
        return self.target_mib - self.mem_p99_mib


def mig_family(model: str) -> tuple[str, int, list[MigProfile]] | None:
    name = (model or "").upper()
    for needles, family, sms, profiles in MIG_FAMILIES:
        if all(n in name for n in needles):
            return family, sms, profiles
    return None


def _risk(target_mib: float, p99: float) -> str:
    margin = target_mib - p99
    share = margin / p99 if p99 > 0 else math.inf
    level = "low" if share >= 0.5 else "moderate" if share >= MEM_HEADROOM else "high"
    return f"{level}: {margin / 1024:.1f} GiB above the p99 of {p99 / 1024:.1f} GiB"


def mig_slices(model: str, profile: str) -> tuple[int, int] | None:
    """(compute slices of 7, SMs) of a MIG instance's profile on this card, None if unknown."""
    fam = mig_family(model)
    for prof in fam[2] if fam else []:
        if prof.name == profile or profile.endswith("." + prof.name):  # "1c.3g.71gb": a compute instance of 3g
            return prof.slices, prof.sms
    return None


def recommend(model: str, card_mib: float, mem_p99_mib: float, activity_p95: float, gpus: int,
              allocated_h: float, price: float | None, card_price: dict[str, float], card_tflops: float | None,
              mig_profile: str = "") -> Sizing | None:
    """The cheapest option that still holds p99 memory + headroom and p95 activity + headroom, or None.

    On a MIG instance (``mig_profile``) activity is the instance's own (DCGM reports it per GPU instance),
    the only advice is a smaller profile of the same card, and ``allocated_h`` is already in GPU-hours
    (instance-hours × its slices / 7)."""
    if allocated_h < MIN_HOURS or not (mem_p99_mib > 0) or not (card_mib > 0) or math.isnan(activity_p95):
        return None
    need = mem_p99_mib * (1 + MEM_HEADROOM)
    compute = min(1.0, activity_p95 * (1 + COMPUTE_HEADROOM))

    def usd(h: float) -> float | None:
        return None if price is None else h * price

    fam = mig_family(model)
    current = mig_slices(model, mig_profile) if mig_profile else None
    if mig_profile and current is None:
        return None  # a MIG instance of a profile we have no table for
    if fam is not None:
        _, sms, profiles = fam
        slices_now, sms_now = current or (7, sms)
        for prof in profiles:
            if prof.slices >= slices_now:
                break
            if prof.mem_mib >= need and prof.sms >= compute * sms_now:
                kept = prof.slices / slices_now
                saved = allocated_h * (1 - kept)
                return Sizing("mig", prof.name, kept, saved, usd(saved), need, prof.mem_mib, mem_p99_mib,
                              activity_p95, _risk(prof.mem_mib, mem_p99_mib))
    if mig_profile:
        return None
    if price is not None and card_tflops:
        for card, mib, tflops in sorted(CARDS, key=lambda c: card_price.get(c[0], math.inf)):
            p = card_price.get(card)
            if p is None or p >= price or mib < need or mib >= card_mib or tflops < compute * card_tflops:
                continue
            kept = p / price
            saved = allocated_h * (1 - kept)
            return Sizing("smaller_card", card, kept, saved, usd(saved), need, mib, mem_p99_mib, activity_p95,
                          _risk(mib, mem_p99_mib))
    if gpus > 1:
        keep = max(math.ceil(gpus * compute), math.ceil(gpus * need / card_mib), 1)
        if keep < gpus:
            kept = keep / gpus
            saved = allocated_h * (1 - kept)
            per_gpu = card_mib * keep / gpus  # memory each of today's GPUs' work gets after packing
            return Sizing("fewer_gpus", f"{keep} GPU(s) instead of {gpus}", kept, saved, usd(saved), need,
                          per_gpu, mem_p99_mib, activity_p95, _risk(per_gpu, mem_p99_mib))
    share = max(compute, need / card_mib)
    ways = int(1 / share) if share > 0 else 1
    if ways >= 2:
        kept = 1 / ways
        saved = allocated_h * (1 - kept)
        return Sizing("mps", f"MPS / time-slicing, 1 of {ways} shares", kept, saved, usd(saved), need,
                      card_mib / ways, mem_p99_mib, activity_p95, _risk(card_mib / ways, mem_p99_mib))
    return None
