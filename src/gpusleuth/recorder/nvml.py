"""NVML sampler: one row per GPU per tick for the ``gpu`` table, and per-process GPU memory.

Why it is shaped this way (facts and costs: ``shared/reference/telemetry.md`` §1 and §8):

- NVML calls take the driver's RM lock and can serialise the job's own kernel submissions, so each tick
  makes as few calls as possible: the counters (energy, instant power, cumulative throttle time by cause,
  PCIe bytes) come from **one** ``nvmlDeviceGetFieldValues`` batch per device; the 20 ms
  ``nvmlDeviceGetPcieThroughput`` and spawning ``nvidia-smi`` are never used; the process list (ms-scale,
  takes the lock) is only read by :meth:`NvmlSampler.sample_processes`, which the recorder calls every few
  seconds.
- A call that the device does not support (``NotSupported``, ``FunctionNotFound`` on an old driver,
  ``NoPermission``) fails the same way every time. It is disabled for that device after its first failure
  and counted in :attr:`NvmlSampler.disabled`, so a 10 Hz loop doesn't pay for a failing call 10×/s.
  Per-field errors inside the field batch are NaN/null for that field, never a failed sample; a field
  that is not supported is dropped from later batches.
- Some fields are expensive on some drivers, and all of that cost is the sampler's CPU: on an H200 with
  driver 580 the batch took 4.3 ms a tick (field 83, energy, 3.0 ms alone; thermal policy/HW thermal/power
  brake 0.3–0.85 ms; PCIe bytes 0.15–0.4 ms) — 5 % of a core per GPU at 10 Hz, and eight GPUs could not
  keep 10 Hz at all. NVML times each field itself (``latencyUsec``): a field that took
  ``SLOW_FIELD_US`` or more is read at most every ``SLOW_FIELD_INTERVAL_NS`` after that (null between). They
  are all cumulative counters, so nothing is lost but resolution, and the recorder's last tick reads every
  field (``sample(..., all_fields=True)``) so a run's energy ends where the run does.
- Utilization is a liveness signal, not a throughput signal. On Hopper+ we add GPM (SM active,
  occupancy, tensor active, DRAM bandwidth) computed between two GPM samples at least
  ``gpm_min_interval_ns`` apart — NVML's hardware counters need ≥100 ms between samples to be meaningful.
- The module is passed in (``nvml``), so tests drive the exact same code with a stand-in fed from
  recorded values; the real ``pynvml`` is only imported when nothing is passed.
- Counters are recorded raw: wrap and differencing are the analysis's job, so nothing is lost here.

NVML's vocabulary (field and GPM metric ids, return codes, MIG numbering) is ``nvml_codes``; one device's state
``nvml_device``; the static facts per device (``hardware()``) ``nvml_hardware``. This module opens NVML, calls it
(``_call``: the one place a failure is counted or switches a call off) and samples.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any, Callable

from gpusleuth.recorder.nvml_codes import (GPM_METRICS, GPU_IS_LOST, PERMANENT, RETURN_NAMES, VALUE_MEMBER,
                                          init_reason, mig_index)
from gpusleuth.recorder.nvml_device import NvmlDevice
from gpusleuth.recorder.nvml_hardware import read_hardware
from gpusleuth.recorder.schemas import GPU_SCHEMA, empty_row

NAN = math.nan

_ROW_TEMPLATE = empty_row(GPU_SCHEMA)

#: a field NVML reports taking this long (µs, its own ``latencyUsec``) is read at the slower cadence below
SLOW_FIELD_US = 200
SLOW_FIELD_INTERVAL_NS = 1_000_000_000


class NvmlSampler:
    """Samples every visible NVIDIA GPU, and each MIG instance of a GPU in MIG mode; build it with
    :meth:`open`, which never raises.

    A MIG instance gets its own rows (index :func:`mig_index`): its memory and its processes are its own;
    power, energy, temperature and clocks exist only for the whole GPU (NVML answers NotSupported on an
    instance), so they stay on the parent's rows and the instance's columns are empty, with the reason."""

    def __init__(self, nvml: Any, devices: list[NvmlDevice], gpm_min_interval_ns: int,
                 clock: Callable[[], int] = time.monotonic_ns):
        self._nvml = nvml
        self._devices = devices
        self._gpm_min_interval_ns = gpm_min_interval_ns
        self._clock = clock  # GPM pairs are timed when the sample is taken, not by the tick's start
        self._error_cls = getattr(nvml, "NVMLError", Exception)
        #: (gpu index, call or ``field:<id>``) → number of failures seen (a disabled call counts once)
        self.failures: Counter[tuple[int, str]] = Counter()
        self._closed = False
        self._hardware: list[dict[str, Any]] | None = None
        for d in list(devices):
            if d.parent is None:
                self._setup_gpm(d)
                if d.mig:
                    self._add_mig_instances(d)

    # ---------------------------------------------------------------- opening
    @classmethod
    def open(cls, nvml: Any = None, *, gpm_min_interval_ns: int = 100_000_000,
             indices: list[int] | None = None, clock: Callable[[], int] = time.monotonic_ns) -> tuple["NvmlSampler | None", str | None]:
        """(sampler, None), or (None, reason) when there is no driver, no GPU, or NVML fails to start.

        ``indices`` restricts sampling to those NVML device indices (default: all).
        """
        if nvml is None:
            try:
                import pynvml  # nvidia-ml-py

                nvml = pynvml
            except ImportError:
                return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
        error_cls = getattr(nvml, "NVMLError", Exception)
        try:
            nvml.nvmlInit()
        except error_cls as e:
            return None, init_reason(e)
        except Exception as e:  # a broken install must not stop the recording of the host
            return None, f"NVML could not start: {type(e).__name__}: {e}"
        try:
            count = nvml.nvmlDeviceGetCount()
            devices = []
            for i in range(count):
                if indices is not None and i not in indices:
                    continue
                try:
                    devices.append(NvmlDevice(i, nvml.nvmlDeviceGetHandleByIndex(i)))
                except error_cls:
                    continue  # e.g. NoPermission on a GPU not given to this container
            if not devices:
                _shutdown(nvml)
                return None, "no GPU (NVML sees no usable NVIDIA device)" if count == 0 or indices is None \
                    else f"no GPU among NVML indices {indices} (NVML sees {count})"
            return cls(nvml, devices, gpm_min_interval_ns, clock), None
        except Exception as e:
            _shutdown(nvml)
            return None, f"NVML failed while listing GPUs: {type(e).__name__}: {e}"

    def _add_mig_instances(self, d: NvmlDevice) -> None:
        """The MIG instances of GPU ``d`` (empty slots answer NotFound and are skipped)."""
        count = self._call(d, "nvmlDeviceGetMaxMigDeviceCount", d.handle) or 0
        for slot in range(int(count)):
            try:
                h = self._nvml.nvmlDeviceGetMigDeviceHandleByIndex(d.handle, slot)
            except Exception:  # NotFound: no instance in this slot
                continue
            m = NvmlDevice(mig_index(d.index, slot), h, parent=d.index)
            for call, why in (("power", f"a MIG instance: NVML meters power, energy, temperature, clocks and their "
                                        f"counters for the whole GPU only (GPU {d.index}'s rows)"),
                              ("nvmlDeviceGetUtilizationRates", "utilization is not reported under MIG"),
                              ("gpm", "per-instance GPM not implemented (the parent GPU in MIG mode has none)")):
                m.disabled[call] = why
            m.fields, m.field_ids, m.reasons_fn = [], [], None
            self._devices.append(m)

    def _setup_gpm(self, d: NvmlDevice) -> None:
        """Enable GPM on devices that say they support it, outside MIG (MIG needs per-instance samples)."""
        mode = self._call(d, "nvmlDeviceGetMigMode", d.handle)
        d.mig = bool(mode and mode[0])
        if d.mig:
            d.disabled.setdefault("nvmlDeviceGetUtilizationRates", "utilization is not reported under MIG")
            d.disabled.setdefault("gpm", "MIG mode is enabled (per-instance GPM not implemented)")
            return
        support = self._call(d, "nvmlGpmQueryDeviceSupport", d.handle)
        if not support or not getattr(support, "isSupportedDevice", 0):
            d.disabled.setdefault("gpm", "GPM not supported on this GPU (Hopper or newer needed)")
            return
        prev = self._call(d, "nvmlGpmSampleAlloc")
        cur = self._call(d, "nvmlGpmSampleAlloc")
        if prev is None or cur is None:
            self._free(prev)
            d.disabled.setdefault("gpm", "nvmlGpmSampleAlloc failed")
            return
        d.gpm, d.gpm_prev, d.gpm_cur = True, prev, cur

    # ---------------------------------------------------------------- calling NVML
    def _call(self, d: NvmlDevice, name: str, *args: Any) -> Any:
        """Call ``nvml.<name>(*args)``; None when it fails. Permanent failures disable it for ``d``."""
        if name in d.disabled or d.lost:
            return None
        try:
            return getattr(self._nvml, name)(*args)
        except AttributeError:  # an nvidia-ml-py too old to have this function
            d.disabled[name] = "not in this nvidia-ml-py"
        except self._error_cls as e:
            code = getattr(e, "value", None)
            if code in PERMANENT:
                d.disabled[name] = f"NVML {RETURN_NAMES.get(code, code)}"
            elif code == GPU_IS_LOST:
                d.lost = True
                d.disabled["*"] = "GPU is lost"
        except Exception as e:
            # pynvml's NVMLLibraryMismatchError (not an NVMLError): a versioned function this pre-R510
            # driver lacks. It will never work; anything else unexpected is counted, not raised.
            if type(e).__name__ == "NVMLLibraryMismatchError":
                d.disabled[name] = "not in this NVIDIA driver (NVMLLibraryMismatchError)"
        self.failures[(d.index, name)] += 1
        return None

    # ---------------------------------------------------------------- static facts
    def hardware(self) -> list[dict[str, Any]]:
        """Static facts per device, for ``meta.json``: what the card is and what it can do.

        Read once and cached: the recorder may ask every second, and each NVML call takes the RM lock.
        """
        if self._hardware is None:
            self._hardware = read_hardware(self._nvml, self._devices, self._call)
        return [dict(h) for h in self._hardware]


    @property
    def disabled(self) -> dict[int, dict[str, str]]:
        """Per GPU index: calls (and ``field:<id>``) switched off after a permanent failure, with why."""
        return {d.index: dict(d.disabled) for d in self._devices}

    def diagnostics(self) -> dict[str, Any]:
        """Why columns are empty, for the run's metadata: per GPU, what was switched off and why, and how
        often each call failed (``{"0": {"disabled": {...}, "failures": {...}}}``)."""
        out: dict[str, dict[str, Any]] = {}
        for d in self._devices:
            fails = {name: n for (i, name), n in self.failures.items() if i == d.index}
            out[str(d.index)] = {"disabled": dict(d.disabled), "failures": fails}
        return out

    # ---------------------------------------------------------------- sampling
    def sample(self, t_ns: int, all_fields: bool = False) -> list[dict[str, Any]]:
        """One ``gpu`` row per device. Anything the device can't answer is NaN/None in that row; a slow
        field not due this tick is left null too (``all_fields``: read every field, as on the last tick)."""
        rows = []
        for d in self._devices:
            t0 = time.perf_counter_ns()
            row = dict(_ROW_TEMPLATE)
            row["t_ns"] = t_ns
            row["gpu"] = d.index
            if not d.lost:
                self._sample_device(d, row, t_ns, all_fields)
            row["sample_us"] = (time.perf_counter_ns() - t0) / 1000.0
            rows.append(row)
        return rows

    def _sample_device(self, d: NvmlDevice, row: dict[str, Any], t_ns: int, all_fields: bool = False) -> None:
        nv, h, call = self._nvml, d.handle, self._call
        if d.parent is not None:  # a MIG instance: only its memory is its own
            m = call(d, "nvmlDeviceGetMemoryInfo", h)
            if m is not None:
                row["mem_used"] = int(m.used)
                row["mem_total"] = int(m.total)
            return
        if not d.mig:  # utilization rates are not supported under MIG: leave NaN, don't even ask
            u = call(d, "nvmlDeviceGetUtilizationRates", h)
            if u is not None:
                row["util_gpu"] = float(u.gpu)
                row["util_mem"] = float(u.memory)
        m = call(d, "nvmlDeviceGetMemoryInfo", h)
        if m is not None:
            row["mem_used"] = int(m.used)
            row["mem_total"] = int(m.total)
        p = call(d, "nvmlDeviceGetPowerUsage", h)
        if p is not None:
            row["power_w"] = p / 1000.0
        t = call(d, "nvmlDeviceGetTemperature", h, getattr(nv, "NVML_TEMPERATURE_GPU", 0))
        if t is not None:
            row["temp_c"] = float(t)
        c = call(d, "nvmlDeviceGetClockInfo", h, getattr(nv, "NVML_CLOCK_SM", 1))
        if c is not None:
            row["sm_clock_mhz"] = float(c)
        c = call(d, "nvmlDeviceGetClockInfo", h, getattr(nv, "NVML_CLOCK_MEM", 2))
        if c is not None:
            row["mem_clock_mhz"] = float(c)
        row["clock_event_reasons"] = self._reasons(d)
        self._fields(d, row, all_fields)
        if d.gpm:
            self._gpm(d, row, t_ns)

    def _reasons(self, d: NvmlDevice) -> int | None:
        """Current clocks-event bitmask; falls back to the pre-535 "throttle reasons" name once."""
        if d.reasons_fn is None:
            return None
        v = self._call(d, d.reasons_fn, d.handle)
        if v is None and d.reasons_fn in d.disabled and d.reasons_fn.endswith("EventReasons"):
            d.reasons_fn = "nvmlDeviceGetCurrentClocksThrottleReasons"
            v = self._call(d, d.reasons_fn, d.handle)
        if v is None and d.reasons_fn in d.disabled:
            d.reasons_fn = None
        return int(v) if v is not None else None

    def _fields(self, d: NvmlDevice, row: dict[str, Any], all_fields: bool = False) -> None:
        """The one field-values batch: counters into the row; per-field errors stay NaN/None. The fields NVML
        timed as slow join the batch only when due (every ``SLOW_FIELD_INTERVAL_NS``) or on ``all_fields``."""
        if not d.fields:
            return
        now = self._clock()
        due = all_fields or not d.slow_ids or d.slow_due_ns is None or now >= d.slow_due_ns
        fields = d.fields if due else [(c, f) for c, f in d.fields if f not in d.slow_ids]
        if not fields:
            return
        values = self._call(d, "nvmlDeviceGetFieldValues", d.handle, [f for _, f in fields])
        if values is None:
            return
        if due:
            d.slow_due_ns = now + SLOW_FIELD_INTERVAL_NS
        dropped = False
        worst_latency = -1
        for (col, fid), v in zip(fields, values):
            ret = v.nvmlReturn
            if ret != 0:
                key = f"field:{fid}"
                self.failures[(d.index, key)] += 1
                if ret in PERMANENT:
                    d.disabled[key] = f"{col}: NVML {RETURN_NAMES.get(ret, ret)}"
                    dropped = True
                continue
            val = getattr(v.value, VALUE_MEMBER.get(v.valueType, "ullVal"))
            if v.latencyUsec > worst_latency:
                worst_latency = v.latencyUsec
            if v.latencyUsec >= SLOW_FIELD_US:
                d.slow_ids.add(fid)
            if col == "energy_mj":
                row["energy_j"] = val / 1000.0
            elif col == "power_instant_mw":
                row["power_instant_w"] = val / 1000.0
            else:
                row[col] = int(val)
        if worst_latency >= 0:
            row["fv_latency_us"] = float(worst_latency)
        if dropped:
            d.fields = [(c, f) for c, f in d.fields if f"field:{f}" not in d.disabled]
            d.field_ids = [f for _, f in d.fields]

    def _gpm(self, d: NvmlDevice, row: dict[str, Any], t_ns: int) -> None:
        """Take a GPM sample when the last one is more than the minimum interval old (NVML needs more than
        100 ms between the two samples of a pair, timed when each is taken), and the metrics between them.

        A failed sample breaks the pair (the next good one starts a new pair, never a stale or reversed
        one); a metrics call that fails for good stops GPM, so no more samples are taken for nothing."""
        now = self._clock()
        if d.gpm_prev_t is not None and now - d.gpm_prev_t <= self._gpm_min_interval_ns:
            return
        if self._call(d, "nvmlGpmSampleGet", d.handle, d.gpm_cur) is None:
            if "nvmlGpmSampleGet" in d.disabled:
                self._stop_gpm(d)
            else:
                d.gpm_prev_t = None  # transient failure: gpm_cur holds nothing usable
            return
        taken = self._clock()
        if d.gpm_prev_t is not None:
            nv = self._nvml
            mg = nv.c_nvmlGpmMetricsGet_t()
            mg.version = getattr(nv, "NVML_GPM_METRICS_GET_VERSION", 1)
            mg.numMetrics = len(GPM_METRICS)
            mg.sample1 = d.gpm_prev
            mg.sample2 = d.gpm_cur
            for i, mid in enumerate(GPM_METRICS.values()):
                mg.metrics[i].metricId = mid
            if self._call(d, "nvmlGpmMetricsGet", mg) is not None:
                for i, col in enumerate(GPM_METRICS):
                    m = mg.metrics[i]
                    if m.nvmlReturn == 0:
                        row[col] = float(m.value)
                    else:
                        self.failures[(d.index, f"gpm:{GPM_METRICS[col]}")] += 1
            elif "nvmlGpmMetricsGet" in d.disabled:
                self._stop_gpm(d)
                return
        d.gpm_prev, d.gpm_cur = d.gpm_cur, d.gpm_prev
        d.gpm_prev_t = taken

    def _stop_gpm(self, d: NvmlDevice) -> None:
        self._free(d.gpm_prev)
        self._free(d.gpm_cur)
        d.gpm, d.gpm_prev, d.gpm_cur = False, None, None
        why = d.disabled.get("nvmlGpmMetricsGet") or d.disabled.get("nvmlGpmSampleGet")
        d.disabled.setdefault("gpm", f"GPM stopped: {why}" if why else "GPM stopped")

    def _free(self, sample: Any) -> None:
        if sample is not None:
            try:
                self._nvml.nvmlGpmSampleFree(sample)
            except Exception:
                pass

    def sample_processes(self, t_ns: int) -> list[dict[str, Any]]:
        """``gpu_procs`` rows: compute processes and their GPU memory (host PIDs), per device.

        Slow (ms, takes the RM lock): the recorder calls this every few seconds, never at the fast rate.
        """
        rows = []
        for d in self._devices:
            if d.mig and any(x.parent == d.index for x in self._devices):
                continue  # the parent of MIG instances: each instance lists its own processes
            procs = self._call(d, "nvmlDeviceGetComputeRunningProcesses", d.handle)
            for p in procs or ():
                used = getattr(p, "usedGpuMemory", None)
                rows.append({"t_ns": t_ns, "gpu": d.index, "pid": int(p.pid),
                             "used_mem": int(used) if used is not None else None})
        return rows

    def close(self) -> None:
        """Free GPM samples and shut NVML down; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for d in self._devices:
            if d.gpm:
                self._stop_gpm(d)
        _shutdown(self._nvml)


def _shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass
