"""A power-cap what-if from a workload's own power and SM-clock samples (``fleet --prometheus --power-cap W``).

A cap the workload never reaches is **inert**: it saves nothing and costs nothing (LLM decode on an H200 draws
137–300 W of 700 W: a cap there never engages). Otherwise the driver lowers the SM clock until the power is
under the cap. The workload's own samples say how its power follows its clock: a least-squares fit of
``P = a + b·f³`` (static power plus dynamic power ∝ f·V², V roughly ∝ f) over every step with both. At the cap
the clock is ``f_cap = ((cap − a) / b)^(1/3)``; a step above the cap runs ``f / f_cap`` times longer (an upper
bound: a memory-bound step slows less) at the cap's power, so the energy saved is
``Σ P·dt − cap · Σ f·dt / f_cap`` over the steps above it and the time added ``Σ f·dt / f_cap − Σ dt``. The
uncertainty is the fit's: 400 draws of (a, b) from its estimated covariance (a fixed seed), the 5th and 95th
percentiles. Without clock samples only the bound is said: at most ``Σ (P − cap)·dt``.

Everything is kept as sums (``CapSums``), so a workload over any number of GPUs and steps costs a few floats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

MIN_FIT_STEPS = 10  # fewer steps with both power and clock: no prediction


@dataclass
class CapSums:
    """What the what-if needs from a workload's steps, as sums (f in GHz, P in W, dt in seconds of its share)."""

    max_w: float = -math.inf
    n: int = 0  # steps with power and clock, for the fit of P on f³
    sx: float = 0.0
    sy: float = 0.0
    sxx: float = 0.0
    sxy: float = 0.0
    syy: float = 0.0
    above_n: int = 0  # steps above the cap
    above_p_dt: float = 0.0  # Σ P·dt over them
    above_p_dt_clocked: float = 0.0  # Σ P·dt over those that have a clock
    above_f_dt: float = 0.0  # Σ f·dt over those that have a clock
    above_dt_clocked: float = 0.0  # Σ dt over those that have a clock
    above_dt: float = 0.0
    excess_j: float = 0.0  # Σ (P − cap)·dt: the most the cap could save

    def add(self, power_w: np.ndarray, clock_mhz: np.ndarray, dt: np.ndarray, cap_w: float) -> None:
        """One GPU's steps held by the workload: power, SM clock (NaN: none) and the seconds that are its share."""
        have = ~np.isnan(power_w)
        if not have.any():
            return
        p, f, d = power_w[have].astype(np.float64), clock_mhz[have].astype(np.float64) / 1000.0, dt[have]
        self.max_w = max(self.max_w, float(p.max()))
        both = ~np.isnan(f)
        x, y = f[both] ** 3, p[both]
        self.n += int(both.sum())
        self.sx += float(x.sum())
        self.sy += float(y.sum())
        self.sxx += float((x * x).sum())
        self.sxy += float((x * y).sum())
        self.syy += float((y * y).sum())
        up = p > cap_w
        self.above_n += int(up.sum())
        self.above_p_dt += float((p * d)[up].sum())
        self.above_dt += float(d[up].sum())
        self.excess_j += float(((p - cap_w) * d)[up].sum())
        clocked = up & both
        self.above_f_dt += float((f * d)[clocked].sum())
        self.above_p_dt_clocked += float((p * d)[clocked].sum())
        self.above_dt_clocked += float(d[clocked].sum())

    def merge(self, other: "CapSums") -> None:
        for k in ("n", "sx", "sy", "sxx", "sxy", "syy", "above_n", "above_p_dt", "above_p_dt_clocked", "above_f_dt", "above_dt_clocked",
                  "above_dt", "excess_j"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.max_w = max(self.max_w, other.max_w)


@dataclass
class CapWhatIf:
    cap_w: float
    state: Literal["inert", "engaged", "no power"]
    max_w: float | None
    bound_j: float  # at most this much energy saved (Σ (P − cap)·dt)
    saved_j: float | None = None  # predicted, from the fit (None: no clocks, or the fit does not hold)
    saved_j_range: tuple[float, float] | None = None  # 5th–95th percentile over the fit's uncertainty
    added_s: float | None = None  # predicted extra time of the steps above the cap
    added_s_range: tuple[float, float] | None = None
    fit: str = ""  # "P = a + b·f³" with its numbers, or why there is none
    notes: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        if self.state == "no power":
            return f"a {self.cap_w:g} W cap: no power samples"
        if self.state == "inert":
            return f"a {self.cap_w:g} W cap is inert: the highest power seen, {self.max_w:,.0f} W, never reaches it"
        if self.saved_j is None or self.saved_j_range is None or self.added_s is None or self.added_s_range is None:
            return (f"a {self.cap_w:g} W cap engages (peak {self.max_w:,.0f} W): it saves at most "
                    f"{self.bound_j / 3.6e6:,.2f} kWh; {self.fit}")
        lo, hi = self.saved_j_range
        alo, ahi = self.added_s_range
        return (f"a {self.cap_w:g} W cap engages (peak {self.max_w:,.0f} W): saves {self.saved_j / 3.6e6:,.2f} kWh "
                f"({lo / 3.6e6:,.2f}–{hi / 3.6e6:,.2f}) for {self.added_s / 3600:,.2f} h more time "
                f"({alo / 3600:,.2f}–{ahi / 3600:,.2f}) at most, from {self.fit}")


def what_if(s: CapSums, cap_w: float, draws: int = 400) -> CapWhatIf:
    if s.max_w == -math.inf:
        return CapWhatIf(cap_w, "no power", None, 0.0)
    if s.above_n == 0:
        return CapWhatIf(cap_w, "inert", s.max_w, 0.0)
    out = CapWhatIf(cap_w, "engaged", s.max_w, s.excess_j)
    if s.n < MIN_FIT_STEPS or s.above_dt_clocked <= 0:
        out.fit = "no SM clock samples to predict the slowdown (DCGM_FI_DEV_SM_CLOCK, in dcgm-exporter's defaults)"
        return out
    n = s.n
    den = n * s.sxx - s.sx * s.sx
    if den <= 0:
        out.fit = "the SM clock never changed, so its samples cannot say how power follows it"
        return out
    b = (n * s.sxy - s.sx * s.sy) / den
    a = (s.sy - b * s.sx) / n
    if b <= 0 or cap_w <= a:
        out.fit = f"power does not rise with the SM clock in these samples (P = {a:.0f} + {b:.1f}·f³): no prediction"
        return out
    sse = max(0.0, s.syy - a * s.sy - b * s.sxy)
    sigma2 = sse / max(1, n - 2)
    cov = sigma2 / den * np.array([[s.sxx, -s.sx], [-s.sx, n]])

    def predict(a_: np.ndarray, b_: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        f_cap = np.cbrt(np.clip((cap_w - a_) / np.where(b_ > 0, b_, np.nan), 1e-9, None))
        stretched = s.above_f_dt / f_cap  # Σ dt·f/f_cap: the clocked above-cap steps' time at the cap
        saved = s.above_p_dt_clocked - cap_w * stretched
        return saved, stretched - s.above_dt_clocked

    saved, added = predict(np.array([a]), np.array([b]))
    rng = np.random.default_rng(0)
    ab = rng.multivariate_normal([a, b], cov, size=draws, method="cholesky") if sigma2 > 0 else np.array([[a, b]])
    s_draw, a_draw = predict(ab[:, 0], ab[:, 1])
    ok = np.isfinite(s_draw) & np.isfinite(a_draw)
    out.saved_j, out.added_s = float(saved[0]), float(added[0])
    out.saved_j_range = (float(np.percentile(s_draw[ok], 5)), float(np.percentile(s_draw[ok], 95)))
    out.added_s_range = (float(np.percentile(a_draw[ok], 5)), float(np.percentile(a_draw[ok], 95)))
    out.fit = f"its own {n:,} power and SM-clock samples: P = {a:.0f} W + {b:.1f} W·(f/GHz)³"
    return out
