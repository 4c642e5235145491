"""Summaries of sampled telemetry over the run: GPU per device, and what every summary shares (``Dist``, counters
differenced, the samples around a short window). The host and the job's processes: ``host_telemetry``.

Utilization is summarized as a distribution over time (mean, p5, p95), never one number, because a
mean hides the dips that matter. Cumulative counters (energy, PCIe bytes, throttle time) are differenced
over the run, with counter wrap handled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np

from gpusleuth.run.model import Run, Table

# Cumulative clock-event counters (ns held down, per cause): exact, no aliasing between samples.
THROTTLE_COUNTERS = {
    "sw_power_cap": "throttle_power_ns",
    "sw_thermal": "throttle_thermal_ns",
    "hw_thermal": "throttle_hw_thermal_ns",
    "hw_power_brake": "throttle_hw_power_brake_ns",
    "sync_boost": "throttle_sync_boost_ns",
}
# NVML_FI_DEV_PERF_POLICY_THERMAL (field 75): thermal violation time, on every driver; the per-cause thermal
# counters (269, 270) exist from R575 only, so on R535–R570 this is the thermal counter
THERMAL_POLICY_COUNTER = "throttle_thermal_policy_ns"
# NVML clock-event reasons that mean the clocks were held down (GpuIdle and settings bits excluded).
# Used per reason where the driver has no counter for it: an instantaneous flag at 10 Hz can miss short
# events.
THROTTLE_BITS = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
}


#: a distribution over the samples (``_dist``): mean, p5, p50, p95 and max
Dist = dict[str, float]


def _columns(t: Table, rows: np.ndarray | None = None) -> Callable[[str], np.ndarray]:
    """A column of ``t`` by name (NaN where the sampler did not record it), at ``rows`` when given."""
    def col(name: str) -> np.ndarray:
        c = t[name] if name in t else np.full(len(t), np.nan)
        return c if rows is None else c[rows]
    return col


def _dist(values: np.ndarray) -> Dist | None:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not len(v):
        return None
    return {
        "mean": float(v.mean()),
        "p5": float(np.percentile(v, 5)),
        "p50": float(np.percentile(v, 50)),
        "p95": float(np.percentile(v, 95)),
        "max": float(v.max()),
    }


def _counter_delta(values: np.ndarray) -> float | None:
    """Total increase of a cumulative counter, tolerating resets/wraps (a drop starts a new segment)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) < 2:
        return None
    d = np.diff(v)
    return float(d[d >= 0].sum())


@dataclass
class GpuSummary:
    index: int
    name: str | None
    samples: int
    util_gpu: Dist | None
    util_mem: Dist | None
    mem_used_max_bytes: float | None
    mem_total_bytes: float | None
    mem_used_share_max: float | None
    power_w: Dist | None
    energy_j: float | None
    temp_c: Dist | None
    sm_clock_mhz: Dist | None
    max_sm_clock_mhz: float | None
    throttled_share: dict[str, float] = field(default_factory=dict)
    pcie_tx_bytes: float | None = None
    pcie_rx_bytes: float | None = None
    sm_active: Dist | None = None
    sm_occupancy: Dist | None = None
    tensor_active: Dist | None = None
    dram_active: Dist | None = None
    sm_count: int | None = None  # a MIG instance's SMs (its share of the parent's peak)
    mig_parent: int | None = None  # a MIG instance: the index of its GPU
    uuid: str | None = None
    # columns with no value over the whole run, and why (from what the recorder switched off and NVML's
    # answer): {"power": "not reported on this GPU (NVML NotSupported)"}
    empty: dict[str, str] = field(default_factory=dict)
    window: Literal["steps", "run"] = "run"  # what the utilization/activity distributions cover


# column of the summary → (gpu table columns, the NVML calls or fields that fill them)
_EMPTY_SOURCES = {
    "util_gpu": (("util_gpu",), ("nvmlDeviceGetUtilizationRates",)),
    "memory": (("mem_used",), ("nvmlDeviceGetMemoryInfo",)),
    "power": (("power_w",), ("nvmlDeviceGetPowerUsage", "power")),
    "energy": (("energy_j",), ("field:83", "nvmlDeviceGetFieldValues", "power")),
    "temperature": (("temp_c",), ("nvmlDeviceGetTemperature", "power")),
    "sm_clock": (("sm_clock_mhz",), ("nvmlDeviceGetClockInfo", "power")),
    "throttle counters": (("throttle_power_ns", "throttle_thermal_ns", "throttle_thermal_policy_ns"),
                          ("field:74", "field:269", "field:75", "nvmlDeviceGetFieldValues", "power")),
    "pcie bytes": (("pcie_tx_bytes",), ("field:197", "nvmlDeviceGetFieldValues", "power")),
    "gpm": (("sm_active",), ("gpm",)),
}


def _empty_reasons(g: Table, diag: dict[str, Any] | None) -> dict[str, str]:
    """Why each empty column is empty: the recorder's record of the call it switched off, else "no value"."""
    disabled = (diag or {}).get("disabled") or {}
    out = {}
    for label, (cols, calls) in _EMPTY_SOURCES.items():
        present = [c for c in cols if c in g]
        if present and any(np.isfinite(np.asarray(g[c], dtype=np.float64)).any() for c in present):
            continue
        why = next((f"{disabled[c]}" for c in calls if c in disabled), None)
        out[label] = (f"not reported on this GPU ({why})" if why else
                      "no value recorded (the recorder's diagnostics do not say why)")
    return out

def summarize_gpus(run: Run, window: tuple[int, int] | None = None) -> list[GpuSummary]:
    """One summary per sampled GPU or MIG instance. With ``window`` (the training steps, ns), utilization
    and activity distributions cover the steps only (as the host's do), so start-up zeros don't dilute the
    means the sizing, low-GPU and headroom rules read; memory peaks, energy and counters cover the run."""
    gpu = run.gpu
    if not len(gpu):
        return []
    rec = run.meta.get("recorder") or {}
    hw = {int(d.get("index", i)): d for i, d in enumerate(rec.get("gpu") or [])}
    diags = rec.get("gpu_diagnostics") or {}
    out = []
    for index in np.unique(gpu["gpu"]).astype(int):
        g = gpu.filter(gpu["gpu"] == index)
        w = samples_around(g["t_ns"], window) if window is not None and "t_ns" in g else None
        col, wcol = _columns(g), _columns(g, w)
        mem_used = col("mem_used").astype(float)
        mem_total = col("mem_total").astype(float)
        used_max = float(np.nanmax(mem_used)) if np.isfinite(mem_used).any() else None
        total = float(np.nanmax(mem_total)) if np.isfinite(mem_total).any() else None
        throttled = _throttled(g)
        info = hw.get(int(index), {})
        out.append(
            GpuSummary(
                index=int(index),
                name=info.get("name"),
                samples=len(g),
                util_gpu=_dist(wcol("util_gpu")),
                util_mem=_dist(wcol("util_mem")),
                mem_used_max_bytes=used_max,
                mem_total_bytes=total,
                mem_used_share_max=(used_max / total) if used_max is not None and total else None,
                power_w=_dist(col("power_w")),
                energy_j=_counter_delta(col("energy_j")),
                temp_c=_dist(col("temp_c")),
                sm_clock_mhz=_dist(col("sm_clock_mhz")),
                max_sm_clock_mhz=info.get("max_sm_clock_mhz"),
                sm_count=info.get("sm_count"),
                throttled_share=throttled,
                pcie_tx_bytes=_counter_delta(col("pcie_tx_bytes")),
                pcie_rx_bytes=_counter_delta(col("pcie_rx_bytes")),
                sm_active=_dist(wcol("sm_active")),
                sm_occupancy=_dist(wcol("sm_occupancy")),
                tensor_active=_dist(wcol("tensor_active")),
                dram_active=_dist(wcol("dram_active")),
                mig_parent=info.get("parent"),
                uuid=info.get("uuid"),
                empty=_empty_reasons(g, diags.get(str(int(index)))) if "gpu_diagnostics" in rec else {},
                window="steps" if w is not None else "run",
            )
        )
    return out


def throttle_sources(g: Table) -> tuple[dict[str, str], dict[str, int]]:
    """Where each clock-event reason of this GPU's samples is read from — the one decision the summary's
    shares and the HTML chart's bands both use: its cumulative counter where the driver has one (exact),
    else the sampled clock-event bit for that reason alone. On R535–R570 the thermal and power-brake counters
    (269–271) are always null while the power-cap counter works, and a fallback taken only when no counter
    moved lost every thermal event there; field 75 (thermal policy) stands in for the per-cause thermal
    counter. Returns ({label: counter column}, {label: reason bit})."""
    counters: dict[str, str] = {}
    counted = set()
    if len(g) > 1:
        for label, column in (*THROTTLE_COUNTERS.items(), ("thermal", THERMAL_POLICY_COUNTER)):
            if label == "thermal" and "sw_thermal" in counted:
                continue  # field 75 is the fallback for the per-cause thermal counter
            if column not in g or np.isfinite(np.asarray(g[column], dtype=np.float64)).sum() < 2:
                continue  # the driver has no such counter: its bit decides
            counters[label] = column
            counted.add(label)
            if label == "thermal":
                counted.add("sw_thermal")
    bits: dict[str, int] = {}
    if "clock_event_reasons" in g:
        skip = set(counted)
        if {"hw_thermal", "hw_power_brake"} <= counted:
            skip.add("hw_slowdown")  # HW slowdown is the union of those two, already counted
        bits = {label: bit for label, bit in THROTTLE_BITS.items() if label not in skip}
    return counters, bits


def _throttled(g: Table) -> dict[str, float]:
    """Share of the run each reason held the clocks down (``throttle_sources`` says from what)."""
    out: dict[str, float] = {}
    span_ns = float(g["t_ns"].max() - g["t_ns"].min()) if len(g) > 1 else 0.0
    counters, bits = throttle_sources(g)
    for label, column in counters.items():
        delta = _counter_delta(np.asarray(g[column], dtype=np.float64))
        if delta and span_ns > 0:
            out[label] = min(delta / span_ns, 1.0)
    if bits:
        raw = np.asarray(g["clock_event_reasons"], dtype=np.float64)
        ok = np.isfinite(raw)
        if ok.any():
            reasons = raw[ok].astype(np.int64)
            for label, bit in bits.items():
                share = float(((reasons & bit) != 0).mean())
                if share > 0:
                    out[label] = share
    return out


def gpu_busy_in(gpu: Table, lo: int, hi: int) -> float | None:
    """The accelerators' mean utilization (0..1, every device's samples) within [lo, hi]; None without any: the
    one rule for a load level's busy share, a request window's and a stall's."""
    if not len(gpu) or "util_gpu" not in gpu or "t_ns" not in gpu:
        return None
    t = np.asarray(gpu["t_ns"], dtype=np.int64)
    u = np.asarray(gpu["util_gpu"], dtype=np.float64)[(t >= lo) & (t <= hi)]
    u = u[np.isfinite(u)]
    return float(u.mean()) / 100.0 if len(u) else None


def samples_around(t_ns: np.ndarray, window: tuple[int, int]) -> np.ndarray | None:
    """Which samples describe ``window``: those inside it — or, for a window holding fewer than two sampling
    times (a loop of 0.2 s at 10 Hz), the window widened to the nearest sampling time on each side, so a
    short loop is measured by the samples around it rather than not at all. Not measured must not read as
    "no other load": a quiet-looking host let a CPU-starved loader be called a high input finding. Process
    samples share their tick's time, so times are counted, not rows. None with fewer than two times."""
    t = np.asarray(t_ns)
    ticks = np.unique(t)
    if len(ticks) < 2:
        return None
    lo, hi = int(window[0]), int(window[1])
    if ((ticks >= lo) & (ticks <= hi)).sum() < 2:
        before, after = ticks[ticks < lo], ticks[ticks > hi]
        lo = int(before[-1]) if len(before) else lo
        hi = int(after[0]) if len(after) else hi
        if ((ticks >= lo) & (ticks <= hi)).sum() < 2:  # the window lies past one end of the samples
            lo, hi = (int(ticks[-2]), int(ticks[-1])) if len(before) else (int(ticks[0]), int(ticks[1]))
    return (t >= lo) & (t <= hi)
