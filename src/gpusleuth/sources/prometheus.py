"""DCGM / Prometheus GPU metrics → a GPU-only Run.

Reads dcgm-exporter and nvidia_gpu_exporter ``/metrics`` text scrapes (one instant each; several files
join into a series, timed by an epoch-seconds number in the file name or else by its modification
time) and Prometheus ``/api/v1/query_range`` JSON dumps (a real time series). Metrics are mapped by
*name* (DCGM field ids are often mislabelled in the wild), GPUs are told apart by host (``Hostname``
or ``hostname``, else ``instance``) and ``gpu``/``UUID``/``uuid``, and DCGM's blank sentinels
(``9223372036854775792``+, ``2**47``+) become nulls. With DCGM profiling fields (SM active, tensor
active, DRAM active) the busy-but-idle and sizing rules use real activity instead of
``utilization.gpu``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from gpusleuth.errors import InputError
from gpusleuth.run.model import Run
from gpusleuth.sources.gpu_samples import build_gpu_run

# metric name → (gpu column, factor)
METRICS: dict[str, tuple[str, float]] = {
    # dcgm-exporter
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu", 1.0),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("util_mem", 1.0),
    "DCGM_FI_DEV_FB_USED": ("mem_used", 2.0**20),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),
    "DCGM_FI_DEV_POWER_USAGE_INSTANT": ("power_instant_w", 1.0),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock_event_reasons", 1.0),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("clock_event_reasons", 1.0),
    "DCGM_FI_DEV_POWER_VIOLATION": ("throttle_power_ns", 1e3),
    "DCGM_FI_DEV_THERMAL_VIOLATION": ("throttle_thermal_ns", 1e3),
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": ("throttle_sync_boost_ns", 1e3),
    "DCGM_FI_PROF_SM_ACTIVE": ("sm_active", 100.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("sm_occupancy", 100.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active", 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("dram_active", 100.0),
    # nvidia_gpu_exporter (base units)
    "nvidia_smi_utilization_gpu_ratio": ("util_gpu", 100.0),
    "nvidia_smi_utilization_memory_ratio": ("util_mem", 100.0),
    "nvidia_smi_memory_used_bytes": ("mem_used", 1.0),
    "nvidia_smi_memory_total_bytes": ("mem_total", 1.0),
    "nvidia_smi_power_draw_watts": ("power_w", 1.0),
    "nvidia_smi_power_draw_instant_watts": ("power_instant_w", 1.0),
    "nvidia_smi_temperature_gpu": ("temp_c", 1.0),
    "nvidia_smi_clocks_current_sm_clock_hz": ("sm_clock_mhz", 1e-6),
    "nvidia_smi_clocks_current_memory_clock_hz": ("mem_clock_mhz", 1e-6),
    "nvidia_smi_clocks_event_reasons_active": ("clock_event_reasons", 1.0),
    "nvidia_smi_clocks_event_reasons_counters_sw_power_cap_seconds": ("throttle_power_ns", 1e9),
    "nvidia_smi_clocks_event_reasons_counters_sw_thermal_slowdown_seconds": ("throttle_thermal_ns", 1e9),
    "nvidia_smi_clocks_event_reasons_counters_hw_thermal_slowdown_seconds": ("throttle_hw_thermal_ns", 1e9),
    "nvidia_smi_clocks_event_reasons_counters_hw_power_brake_slowdown_seconds": ("throttle_hw_power_brake_ns", 1e9),
    "nvidia_smi_clocks_event_reasons_counters_sync_boost_seconds": ("throttle_sync_boost_ns", 1e9),
}
FB_PARTS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")
GR_ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
PCIE_RATES = {"DCGM_FI_PROF_PCIE_TX_BYTES": "pcie_tx_bytes", "DCGM_FI_PROF_PCIE_RX_BYTES": "pcie_rx_bytes"}
INT64_BLANK = 9223372036854775792.0 * (1 - 1e-15)  # DCGM_INT64_BLANK and above: blank / not supported
FP64_BLANK = 140737488355328.0  # 2**47 … +3


def is_text_scrape(text: str) -> bool:
    return bool(re.search(r"(?m)^(DCGM_FI_\w+|nvidia_smi_\w+)(\{[^}]*\})? ", text[:1 << 20]))


def _blank(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return np.where((v >= INT64_BLANK) | ((v >= FP64_BLANK) & (v < FP64_BLANK + 4)), np.nan, v)


class _Series:
    """Long-format samples gathered from either format, pivoted into gpu columns at the end."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str], dict[str, list[tuple[np.ndarray, np.ndarray]]]] = defaultdict(
            lambda: defaultdict(list))
        self.devices: dict[tuple[str, str], dict[str, Any]] = {}
        self.counter_types: dict[str, str] = {}

    def add(self, name: str, labels: dict[str, Any], t_ns: np.ndarray, v: np.ndarray) -> None:
        key = _device_key(labels)
        if key is None:
            return
        if name == "nvidia_smi_gpu_info" or "modelName" in labels or "DCGM_FI_DEV_NAME" in labels:
            info = self.devices.setdefault(key, {})
            for lab, field in (("name", "name"), ("modelName", "name"), ("DCGM_FI_DEV_NAME", "name"),
                               ("pci_bus_id", "pci_bus_id"), ("UUID", "uuid"), ("uuid", "uuid"),
                               ("driver_version", "driver_version"), ("DCGM_FI_DRIVER_VERSION", "driver_version")):
                if labels.get(lab):
                    info.setdefault(field, labels[lab])
            if key[0]:
                info.setdefault("host", key[0])
        if name == "nvidia_smi_clocks_max_sm_clock_hz" and len(v):
            self.devices.setdefault(key, {})["max_sm_clock_mhz"] = float(v[-1]) / 1e6
        if name in METRICS or name in FB_PARTS or name == GR_ENGINE or name in PCIE_RATES:
            self.values[key][name].append((t_ns, _blank(v)))

    def columns(self, path: Path, losses: list[str]) -> tuple[dict[str, np.ndarray], dict[int, dict[str, Any]]]:
        keys = sorted(self.values, key=lambda k: (k[0], _int_or(k[1])))
        hosts = {k[0] for k in keys}
        parts: dict[str, list[np.ndarray]] = defaultdict(list)
        devices: dict[int, dict[str, Any]] = {}
        for i, key in enumerate(keys):
            index = _int_or(key[1]) if len(hosts) == 1 and isinstance(_int_or(key[1]), int) else i
            devices[index] = {**self.devices.get(key, {}), **({"host": key[0]} if key[0] else {})}
            series = {name: (np.concatenate([t for t, _ in s]), np.concatenate([v for _, v in s]))
                      for name, s in self.values[key].items()}
            times = np.unique(np.concatenate([t for t, _ in series.values()]))
            n = len(times)
            cols: dict[str, np.ndarray] = {}

            def aligned(name: str) -> np.ndarray:
                t, v = series[name]
                out = np.full(n, np.nan)
                out[np.searchsorted(times, t)] = v
                return out

            for name, (column, factor) in METRICS.items():
                if name in series and column not in cols:
                    cols[column] = aligned(name) * factor
            if "util_gpu" not in cols and GR_ENGINE in series:
                cols["util_gpu"] = aligned(GR_ENGINE) * 100
                losses.append(f"{path.name}: GPU {index}: no DCGM_FI_DEV_GPU_UTIL; utilization is "
                              "DCGM_FI_PROF_GR_ENGINE_ACTIVE (the same kernel-active measure)")
            if "mem_total" not in cols and all(p in series for p in FB_PARTS[:2]):
                total = sum(np.nan_to_num(aligned(p)) for p in FB_PARTS if p in series) * 2.0**20
                cols["mem_total"] = np.where(total > 0, total, np.nan)
            for name, column in PCIE_RATES.items():
                if name in series:
                    v = aligned(name)
                    if self.counter_types.get(name) == "counter":
                        cols[column] = v
                    else:  # a rate in bytes/s (dcgm-exporter's default counters file): integrate it
                        dt = np.diff(times, prepend=times[0]) / 1e9
                        cols[column] = np.cumsum(np.nan_to_num(v) * dt)
            cols["t_ns"] = times
            cols["gpu"] = np.full(n, index, np.int32)
            for k, v in cols.items():
                parts[k].append(v)
            for k in parts:
                if k not in cols:
                    parts[k].append(np.full(n, np.nan))
        width = sum(len(p) for p in parts["t_ns"])
        out: dict[str, np.ndarray] = {}
        for k, pieces in parts.items():
            col = np.concatenate(pieces)
            if len(col) < width:  # a column first seen on a later GPU: pad the earlier ones
                col = np.concatenate([np.full(width - len(col), np.nan), col])
            out[k] = col
        out["t_ns"] = out["t_ns"].astype(np.int64)
        out["gpu"] = out["gpu"].astype(np.int32)
        return out, devices


def _int_or(s: str) -> Any:
    try:
        return int(s)
    except (TypeError, ValueError):
        return s


def _device_key(labels: dict[str, Any]) -> tuple[str, str] | None:
    host = labels.get("hostname") or labels.get("Hostname") or labels.get("instance") or ""
    gpu = labels.get("gpu")
    if gpu is None or gpu == "":
        gpu = labels.get("UUID") or labels.get("uuid") or labels.get("gpu_uuid")
    if gpu is None:
        return None
    return host, str(gpu)


def read_text_scrapes(paths: list[Path]) -> Run:
    from prometheus_client.parser import text_string_to_metric_families

    series = _Series()
    losses: list[str] = []
    stamps = []
    for p in paths:
        m = re.search(r"(?<!\d)(1[5-9]\d{8}|2\d{9})(?:\.\d+)?(?!\d)", p.name)
        stamps.append((int(float(m.group(0)) * 1e9), "name") if m else (int(p.stat().st_mtime * 1e9), "mtime"))
    if len({t for t, _ in stamps}) < len(stamps):
        base = min(t for t, _ in stamps)
        stamps = [(base + i * 1_000_000_000, "order") for i in range(len(stamps))]
        losses.append(f"{paths[0].name}: {len(paths)} scrapes share a time; placed 1 s apart in the order given")
    unusable = 0
    for p, (t_ns, _) in zip(paths, stamps):
        text = p.read_text(encoding="utf-8", errors="replace").removeprefix("\ufeff")  # a BOM is no metric
        try:
            families = list(text_string_to_metric_families(text))
        except (ValueError, TypeError, IndexError) as exc:
            raise InputError(p, f"not a valid Prometheus text exposition ({exc})") from None
        for fam in families:
            if fam.name in PCIE_RATES or fam.name + "_total" in PCIE_RATES:
                series.counter_types[fam.name] = fam.type
            for s in fam.samples:
                try:  # a value or time beyond float / int64 range (a 400-digit number) is one bad sample
                    ts = np.array([int(float(s.timestamp) * 1e9) if s.timestamp else t_ns], np.int64)
                    value = np.array([s.value], float)
                except (OverflowError, ValueError, TypeError):
                    unusable += 1
                    continue
                series.add(s.name, s.labels, ts, value)
    if unusable:
        losses.append(f"{paths[0].name}: dropped {unusable:,} sample(s) whose value or time is beyond any number "
                      "range (damage)")
    if not series.values:
        raise InputError(paths[0], "a Prometheus scrape with no GPU metrics gpusleuth knows (DCGM_FI_* from "
                                   "dcgm-exporter, nvidia_smi_* from nvidia_gpu_exporter)")
    if any(how == "mtime" for _, how in stamps):
        losses.append(f"{paths[0].name}: scrapes carry no time; each file is timed by its modification time "
                      "(name files scrape-<epoch seconds>.prom to time them exactly)")
    if len(paths) == 1:
        losses.append(f"{paths[0].name}: one scrape is one instant, not a time series: utilization over time needs "
                      "several scrapes or a query_range export")
    cols, devices = series.columns(paths[0], losses)
    return build_gpu_run(paths[0], cols, source="prometheus", devices=devices, losses=losses,
                         meta={"import_files": [str(p) for p in paths]})


def read_query_range(path: Path) -> Run:
    import msgspec

    try:
        doc = msgspec.json.decode(path.read_bytes().removeprefix(b"\xef\xbb\xbf"))  # a BOM is layout
    except msgspec.DecodeError as exc:
        raise InputError(path, f"not valid JSON ({exc})") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise InputError(path, "not a Prometheus query response (expected {\"status\":…,\"data\":{\"result\":[…]}})")
    if doc.get("status") not in (None, "success"):
        raise InputError(path, f"the Prometheus query failed: {doc.get('error') or doc.get('status')}")
    series = _Series()
    skipped = dropped = 0
    for item in data["result"]:
        metric = item.get("metric") or {}
        name = metric.get("__name__")
        values = item.get("values") or ([item["value"]] if item.get("value") else [])
        if not name or not values:
            skipped += 1
            continue
        try:
            with np.errstate(over="ignore", invalid="ignore"):  # 1e308 s × 1e9 is inf: dropped below, said once
                t = np.array([float(v[0]) for v in values]) * 1e9
            v = np.array([float(v[1]) for v in values])
        except (TypeError, ValueError, IndexError, OverflowError):  # OverflowError: a 400-digit number
            skipped += 1
            continue
        when = np.isfinite(t) & (np.abs(t) < 2.0**62)  # a time that is not one (inf, 1e308 s) is dropped, said
        if not when.all():
            dropped += int((~when).sum())
            t, v = t[when], v[when]
            if not len(t):
                skipped += 1
                continue
        series.add(name, metric, t.astype(np.int64), v)
    losses = []
    if dropped:
        losses.append(f"{path.name}: {dropped} point(s) whose timestamp is not a time (infinite, or past the "
                      "year 2116) were dropped")
    if skipped:
        losses.append(f"{path.name}: {skipped} series without a metric name or readable values were skipped "
                      "(query with the metric names, not an expression that drops __name__)")
    if not series.values:
        raise InputError(path, "a Prometheus query result with no GPU metrics gpusleuth knows (DCGM_FI_* or "
                               "nvidia_smi_* series, each with a gpu/UUID label)")
    cols, devices = series.columns(path, losses)
    return build_gpu_run(path, cols, source="prometheus", devices=devices, losses=losses)
