"""A GPU's energy over the ledger's grid: the DCGM energy counter's increase per step (resets read as restarts
from zero, as Prometheus' ``increase`` does), else power × step — and the same counter reading for an inference
engine's token counters (``tokens.py``)."""

from __future__ import annotations

import numpy as np


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


def step_energy(energy_mj: np.ndarray, power_w: np.ndarray, step_s: int) -> tuple[np.ndarray, str, int]:
    """Joules per step (the counter's increase where it has one, else power × step: the power integral), where
    they came from ("counter", "power", both, or ""), and the counter's resets."""
    counted, resets = counter_increase(energy_mj)
    energy = np.where(np.isnan(counted), power_w.astype(np.float64) * step_s, counted / 1000.0)
    source = ("counter" if not np.isnan(counted).all() else "") + (
        "power" if (np.isnan(counted) & ~np.isnan(power_w)).any() else "")
    return energy, source, resets
