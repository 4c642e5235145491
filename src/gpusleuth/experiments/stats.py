"""Noise bands, the winner rule and the knee: the few numbers a sweep's verdict rests on.

A sweep is only worth trusting if it says when it cannot tell two configurations apart. Each configuration
is run ``R`` times; its band is the min–max of the repeats, never narrower than ``±floor`` of the median
(two lucky repeats that agree to 0.1 % do not prove a 1 % win; one repeat alone gets the floor and says so).
The winner must beat the runner-up with the bands apart; otherwise the verdict is "no significant difference".
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

from gpusleuth.analysis.noise import REPEAT_FLOOR, repeats_floor  # one noise model with compare

NOISE_FLOOR = REPEAT_FLOOR  # ± share of the median a band of ≥ 2 repeats is at least
KNEE_TOLERANCE = 0.05  # the knee is the smallest setting within 5 % of the best throughput


@dataclass
class Band:
    median: float
    lo: float
    hi: float
    n: int
    assumed: bool  # widened to the floor (one repeat, or repeats closer than the floor)

    @property
    def rel_halfwidth(self) -> float:
        return (self.hi - self.lo) / 2 / self.median if self.median else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"median": self.median, "lo": self.lo, "hi": self.hi, "n": self.n, "floor_applied": self.assumed}


def band(values: Sequence[float | None], floor: float | None = None) -> Band | None:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    if floor is None:  # analysis/noise.py: one repeat gets the run-to-run floor, repeats their own spread
        floor = repeats_floor(len(vals))
    med = statistics.median(vals)
    lo, hi = min(vals), max(vals)
    assumed = False
    if med > 0:
        if med - lo < floor * med:
            lo, assumed = med * (1 - floor), True
        if hi - med < floor * med:
            hi, assumed = med * (1 + floor), True
    return Band(median=med, lo=lo, hi=hi, n=len(vals), assumed=assumed)


@dataclass
class Verdict:
    winner: str | None  # label of the winning configuration; None when there is no significant one
    best: str | None  # the best median, significant or not
    runner_up: str | None
    ratio: float | None  # best median / runner-up median (oriented so > 1 is better)
    significant: bool
    text: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def verdict(bands: dict[str, Band], higher_is_better: bool = True, what: str = "throughput") -> Verdict:
    """Pick the best configuration and say whether it beats the runner-up beyond the noise."""
    items = [(k, b) for k, b in bands.items() if b is not None and b.median > 0]
    if not items:
        return Verdict(None, None, None, None, False, f"no configuration produced a {what}")
    items.sort(key=lambda kb: kb[1].median, reverse=higher_is_better)
    best, bb = items[0]
    if len(items) == 1:
        return Verdict(best, best, None, None, False, f"only {best} produced a {what}: nothing to compare")
    second, sb = items[1]
    ratio = bb.median / sb.median if higher_is_better else sb.median / bb.median
    apart = bb.lo > sb.hi if higher_is_better else bb.hi < sb.lo
    if apart:
        text = (f"{best} wins: {what} {ratio:.2f}× the runner-up ({second}), beyond the noise band "
                f"(±{bb.rel_halfwidth:.0%} vs ±{sb.rel_halfwidth:.0%})")
        return Verdict(best, best, second, ratio, True, text)
    text = (f"no significant difference: {best} and {second} differ by {abs(ratio - 1):.1%}, inside the noise "
            f"band (±{bb.rel_halfwidth:.0%} vs ±{sb.rel_halfwidth:.0%}); keep the simpler or cheaper one")
    return Verdict(None, best, second, ratio, False, text)


@dataclass
class Knee:
    value: float | None
    best_value: float | None
    text: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def knee(points: Sequence[tuple[float, float | None, bool, str]], tolerance: float = KNEE_TOLERANCE,
         unit: str = "samples/s") -> Knee:
    """The smallest setting whose throughput is within ``tolerance`` of the best admissible one.

    ``points`` are (setting, throughput, admissible, why-not). Past the knee, a larger setting buys less
    than ``tolerance`` more throughput: the largest batch that still improves throughput.
    """
    ok = sorted((x, y) for x, y, adm, _ in points if adm and y is not None and y > 0)
    rejected = [f"{x:g} ({why})" for x, y, adm, why in sorted(points, key=lambda p: p[0]) if not adm and why]
    if not ok:
        return Knee(None, None, "no setting is admissible" + (f": {', '.join(rejected)}" if rejected else ""))
    top_x, top_y = max(ok, key=lambda p: p[1])
    for x, y in ok:
        if y >= (1 - tolerance) * top_y:
            text = (f"knee at {x:g}: {y:,.0f} {unit}, within {tolerance:.0%} of the best ({top_y:,.0f} at {top_x:g}); "
                    "larger settings add less than that")
            if rejected:
                text += f"; excluded: {', '.join(rejected)}"
            return Knee(x, top_x, text)
    raise AssertionError("unreachable: the best point is within tolerance of itself")
