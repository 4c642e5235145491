"""Dollars: per run, per 1k samples, per epoch, per recoverable second — from a dated price table.

Defaults are approximate on-demand USD per GPU-hour (hyperscaler list prices, US regions) collected for
shared/reference/whatif_mfu.md §6; prices moved a lot in 2025–26, so the table carries its date, users
override it with ``--price-per-gpu-hour`` (or a JSON file via ``--prices``), and every report prints
which price it used. Cost is wall-clock GPU time, badput included: that is what the user pays.
"""

from __future__ import annotations

from dataclasses import dataclass

PRICES_DATE = "2026-05"
DEFAULT_PRICES: dict[str, float] = {
    "H100 NVL": 4.00,
    "H100 PCIe": 3.50,
    "H100 SXM": 4.00,
    "H200": 5.00,
    "GH200": 5.00,
    "B200": 7.00,
    "A100": 2.00,
    "A10G": 1.00,
    "A10": 1.00,
    "L40S": 1.50,
    "L4": 0.80,
    "T4": 0.50,
    "V100": 1.50,
    "RTX 4090": 0.50,
}


@dataclass
class Price:
    per_gpu_hour: float
    model: str
    source: str


@dataclass
class Cost:
    price: Price
    gpus: int
    per_run: float
    per_1k_samples: float | None
    per_epoch: float | None
    samples_per_epoch: int | None
    per_recoverable_second: float  # what one second of wall time saved is worth, all GPUs


def price_table(user: dict[str, float] | None = None) -> dict[str, float]:
    """The dated defaults with the user's table (``sources/prices.read_price_table``) over them."""
    return {**DEFAULT_PRICES, **(user or {})}


def find_price(model: str | None, override: float | None, prices: dict[str, float]) -> Price | None:
    if override is not None:
        return Price(per_gpu_hour=float(override), model=model or "this machine", source="--price-per-gpu-hour")
    if model and model in prices:
        src = f"price table ({PRICES_DATE}, on-demand list price; override with --price-per-gpu-hour)"
        return Price(per_gpu_hour=prices[model], model=model, source=src)
    return None


def compute_cost(price: Price, gpus: int, wall_s: float, samples: int | None, samples_per_s_wall: float | None,
                 samples_per_epoch: int | None) -> Cost:
    per_second = price.per_gpu_hour * max(gpus, 1) / 3600.0
    per_run = per_second * wall_s
    per_1k = per_run / samples * 1000 if samples else None
    per_epoch = None
    if samples_per_epoch and samples_per_s_wall:
        per_epoch = per_second * samples_per_epoch / samples_per_s_wall
    return Cost(price=price, gpus=max(gpus, 1), per_run=per_run, per_1k_samples=per_1k, per_epoch=per_epoch,
                samples_per_epoch=samples_per_epoch, per_recoverable_second=per_second)
