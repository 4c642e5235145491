"""NvmlSampler through its test boundary: a pynvml stand-in replaying fixture values.

The stand-in raises the real ``pynvml`` exception classes and uses its constants, so the sampler's
error handling is exercised exactly as with a driver. Fixtures: ``tests/fixtures/nvml/`` (the synthetic
ones are to be replaced by recordings from ``scripts/gpu_check.py``).
"""

from __future__ import annotations

import copy
import gzip
import json
import math
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pynvml
import pytest

from gpusleuth.recorder.nvml import NvmlSampler
from gpusleuth.recorder.nvml_codes import FIELDS
from gpusleuth.recorder.schemas import GPU_PROCS_SCHEMA, GPU_SCHEMA, to_batch

FIXTURES = Path(__file__).parent / "fixtures" / "nvml"
GiB = 1 << 30
MS = 1_000_000


def load(name: str) -> dict:
    path = FIXTURES / name
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def all_fixtures() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir() if p.name.endswith((".json", ".json.gz")))


class FakeNvml:
    """Just enough of ``pynvml`` for the sampler, fed from a fixture; ``tick`` selects the reading."""

    NVMLError = pynvml.NVMLError

    def __init__(self, fx: dict):
        self.fx = fx
        self.tick = 0
        self.calls: Counter[str] = Counter()
        self.field_requests: list[list[int]] = []
        self.freed = 0
        self.shutdown = 0
        self.transient: dict[str, list] = {}  # fn → [error name, times left]
        self.now_ns = 0  # the replayed monotonic clock (run_ticks sets it to each tick's time)

    def __getattr__(self, name):  # constants and exception classes are the real ones
        if name.startswith(("NVML_", "NVMLError")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    # -- helpers
    def _enter(self, fn: str, h: int | None = None):
        self.calls[fn] += 1
        t = self.transient.get(fn)
        if t and t[1] > 0:
            t[1] -= 1
            raise getattr(pynvml, "NVMLError_" + t[0])()
        if h is not None:
            err = self.fx["devices"][h]["errors"].get(fn)
            if err:
                raise getattr(pynvml, "NVMLError_" + err)()
            ticks = self.fx["devices"][h]["ticks"]
            return self.fx["devices"][h]["static"], ticks[min(self.tick, len(ticks) - 1)]
        return None, None

    # -- library
    def nvmlInit(self):
        self.calls["nvmlInit"] += 1
        if self.fx.get("init_error"):
            raise getattr(pynvml, "NVMLError_" + self.fx["init_error"])()

    def nvmlShutdown(self):
        self.shutdown += 1

    def nvmlDeviceGetCount(self):
        return len(self.fx["devices"])

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlSystemGetDriverVersion(self):
        return self.fx["system"]["driver_version"]

    def nvmlSystemGetCudaDriverVersion(self):
        return self.fx["system"]["cuda_driver_version"]

    # -- static
    def nvmlDeviceGetName(self, h):
        return self._enter("nvmlDeviceGetName", h)[0]["name"]

    def nvmlDeviceGetUUID(self, h):
        return self._enter("nvmlDeviceGetUUID", h)[0]["uuid"]

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._enter("nvmlDeviceGetPciInfo", h)[0]["pci_bus_id"].encode())

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._enter("nvmlDeviceGetEnforcedPowerLimit", h)[0]["power_limit_mw"]

    def nvmlDeviceGetMaxClockInfo(self, h, clock):
        return self._enter("nvmlDeviceGetMaxClockInfo", h)[0]["max_clock"][str(clock)]

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return tuple(self._enter("nvmlDeviceGetCudaComputeCapability", h)[0]["compute_capability"])

    def nvmlDeviceGetMigMode(self, h):
        return list(self._enter("nvmlDeviceGetMigMode", h)[0]["mig_mode"])

    # -- per tick
    def nvmlDeviceGetUtilizationRates(self, h):
        u = self._enter("nvmlDeviceGetUtilizationRates", h)[1]["util"]
        return SimpleNamespace(gpu=u[0], memory=u[1])

    def nvmlDeviceGetMemoryInfo(self, h):
        m = self._enter("nvmlDeviceGetMemoryInfo", h)[1]["memory"]
        return SimpleNamespace(total=m[0], used=m[1], free=m[2])

    def nvmlDeviceGetPowerUsage(self, h):
        return self._enter("nvmlDeviceGetPowerUsage", h)[1]["power_mw"]

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._enter("nvmlDeviceGetTemperature", h)[1]["temp_c"]

    def nvmlDeviceGetClockInfo(self, h, clock):
        return self._enter("nvmlDeviceGetClockInfo", h)[1]["clock"][str(clock)]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._enter("nvmlDeviceGetCurrentClocksEventReasons", h)[1]["clock_event_reasons"]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", h)[1]["clock_event_reasons"]

    def nvmlDeviceGetFieldValues(self, h, ids):
        fields = self._enter("nvmlDeviceGetFieldValues", h)[1]["fields"]
        self.field_requests.append(list(ids))
        out = []
        for fid in ids:
            ret, vt, val, lat = fields.get(str(fid), [pynvml.NVML_ERROR_NOT_SUPPORTED, 0, 0, 0])
            member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}[vt]
            out.append(SimpleNamespace(fieldId=fid, scopeId=0, timestamp=0, latencyUsec=lat, valueType=vt,
                                       nvmlReturn=ret, value=SimpleNamespace(**{member: val})))
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._enter("nvmlDeviceGetComputeRunningProcesses", h)
        return [SimpleNamespace(pid=p, usedGpuMemory=m, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
                for p, m in self.fx["devices"][h]["processes"]]

    # -- GPM
    def nvmlGpmQueryDeviceSupport(self, h):
        st = self._enter("nvmlGpmQueryDeviceSupport", h)[0]
        return SimpleNamespace(version=1, isSupportedDevice=int(bool(st["gpm_supported"])))

    def nvmlGpmSampleAlloc(self):
        self.calls["nvmlGpmSampleAlloc"] += 1
        return SimpleNamespace(tick=None, dev=None)

    def nvmlGpmSampleFree(self, s):
        self.freed += 1

    def nvmlGpmSampleGet(self, h, s):
        self._enter("nvmlGpmSampleGet", h)
        s.tick, s.dev = self.tick, h
        return s

    class c_nvmlGpmMetricsGet_t:
        def __init__(self):
            self.version = self.numMetrics = 0
            self.sample1 = self.sample2 = None
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(32)]

    def nvmlGpmMetricsGet(self, mg):
        self.calls["nvmlGpmMetricsGet"] += 1
        assert mg.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        assert mg.sample1 is not mg.sample2 and mg.sample1.tick < mg.sample2.tick
        ticks = self.fx["devices"][mg.sample2.dev]["ticks"]
        gpm = ticks[min(mg.sample2.tick, len(ticks) - 1)]["gpm"] or {}
        for m in mg.metrics[: mg.numMetrics]:
            v = gpm.get(str(m.metricId))
            m.nvmlReturn, m.value = (0, v) if v is not None else (pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0)
        return mg


def open_fake(name: str = "h100_synthetic.json", mutate=None, **kw):
    fx = copy.deepcopy(load(name))
    if mutate:
        mutate(fx)
    fake = FakeNvml(fx)
    kw.setdefault("clock", lambda: fake.now_ns)  # the sampler times GPM pairs by its clock: the replayed one
    sampler, reason = NvmlSampler.open(fake, **kw)
    assert reason is None and sampler is not None
    return sampler, fake


def run_ticks(sampler, fake, n, step_ns=100 * MS):
    rows = []
    t0 = fake.fx["devices"][0]["ticks"][0]["t_ns"]
    for i in range(n):
        fake.tick = i
        fake.now_ns = t0 + i * step_ns + 2 * MS  # sampled a little after the tick starts
        rows.extend(sampler.sample(t0 + i * step_ns))
    return rows


# --------------------------------------------------------------------------- opening
def test_fixtures_are_marked_synthetic_until_recorded():
    for name in all_fixtures():
        fx = load(name)
        assert fx["format"] == "gpusleuth-nvml-fixture/1"
        if fx["synthetic"]:
            assert "to be replaced by values recorded with scripts/gpu_check.py" in fx["note"]


def test_driver_missing_gives_reason_not_exception():
    fake = FakeNvml(load("driver_missing_synthetic.json"))
    sampler, reason = NvmlSampler.open(fake)
    assert sampler is None
    assert reason == "no NVIDIA driver (libnvidia-ml.so.1 not found)"


def test_driver_not_loaded_and_other_init_errors():
    fx = load("driver_missing_synthetic.json")
    fx["init_error"] = "DriverNotLoaded"
    assert NvmlSampler.open(FakeNvml(fx)) == (None, "NVIDIA driver not loaded")
    fx["init_error"] = "Unknown"
    sampler, reason = NvmlSampler.open(FakeNvml(fx))
    assert sampler is None and reason.startswith("NVML could not start")


def test_no_gpu_shuts_nvml_down():
    fx = copy.deepcopy(load("h100_synthetic.json"))
    fx["devices"] = []
    fake = FakeNvml(fx)
    sampler, reason = NvmlSampler.open(fake)
    assert sampler is None and reason.startswith("no GPU")
    assert fake.shutdown == 1


def test_real_pynvml_open_never_raises():
    """On this machine: the real library either finds a GPU or says why not — never raises."""
    sampler, reason = NvmlSampler.open()
    if sampler is None:
        assert isinstance(reason, str) and reason
    else:
        assert sampler.sample(0)
        sampler.close()


# --------------------------------------------------------------------------- H100 values
def test_h100_columns_and_unit_conversions():
    sampler, fake = open_fake()
    rows = run_ticks(sampler, fake, 5)
    assert len(rows) == 5 and all(r["gpu"] == 0 for r in rows)
    r0, r1 = rows[0], rows[1]
    assert set(r0) == set(GPU_SCHEMA.names)
    assert (r0["util_gpu"], r0["util_mem"]) == (87.0, 41.0)
    assert r1["mem_used"] == int(71.2 * GiB) and r1["mem_total"] == 85520809984
    assert r1["mem_total"] / GiB == pytest.approx(79.6, abs=0.1)
    assert r0["power_w"] == pytest.approx(512.034)  # mW → W
    assert r0["power_instant_w"] == pytest.approx(530.112)
    assert r0["energy_j"] == pytest.approx(3_412_998.0)  # mJ → J
    rate = [(b["energy_j"] - a["energy_j"]) / 0.1 for a, b in zip(rows, rows[1:])]
    assert rate == pytest.approx([512.0] * 4)  # ~512 J/s, as the power says
    assert r0["temp_c"] == 64.0 and r0["sm_clock_mhz"] == 1980.0 and r0["mem_clock_mhz"] == 2619.0
    assert [r["clock_event_reasons"] for r in rows] == [0, 0, 0, pynvml.nvmlClocksEventReasonSwPowerCap, 0]
    assert rows[2]["throttle_power_ns"] - rows[1]["throttle_power_ns"] == 5_000_000
    assert r0["throttle_sync_boost_ns"] == 0 and r0["throttle_thermal_ns"] == 0 and r0["throttle_hw_thermal_ns"] == 0
    assert r0["throttle_hw_power_brake_ns"] is None  # the NotSupported field
    assert rows[1]["pcie_rx_bytes"] - r0["pcie_rx_bytes"] == 120_000_000
    assert rows[1]["pcie_tx_bytes"] - r0["pcie_tx_bytes"] == 4_000_000
    assert r0["fv_latency_us"] == 14.0
    assert r0["sample_us"] > 0
    for r in rows:  # integers stay integers: counters are never floats
        for col in ("mem_used", "throttle_power_ns", "pcie_tx_bytes", "clock_event_reasons"):
            assert isinstance(r[col], int)


def test_one_field_batch_per_device_per_sample_and_no_slow_calls():
    sampler, fake = open_fake()
    run_ticks(sampler, fake, 4)
    assert fake.calls["nvmlDeviceGetFieldValues"] == 4
    assert sorted(fake.field_requests[0]) == sorted(FIELDS.values())
    assert "nvmlDeviceGetPcieThroughput" not in fake.calls
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 0  # only in sample_processes


def test_gpm_metrics_computed_between_two_samples():
    sampler, fake = open_fake()
    rows = run_ticks(sampler, fake, 4, step_ns=150 * MS)
    assert all(math.isnan(rows[0][c]) for c in ("sm_active", "sm_occupancy", "tensor_active", "dram_active"))
    assert rows[1]["sm_active"] == pytest.approx(79.4)
    assert rows[1]["sm_occupancy"] == pytest.approx(31.7)
    assert rows[1]["tensor_active"] == pytest.approx(51.3)
    assert rows[1]["dram_active"] == pytest.approx(44.9)
    assert rows[3]["sm_active"] == pytest.approx(81.4)
    assert fake.calls["nvmlGpmMetricsGet"] == 3


def test_gpm_only_when_samples_more_than_100ms_apart():
    """NVML needs *more than* 100 ms between the two samples of a pair: at a 50 ms tick, exactly 100 ms
    apart is not enough (the old gate took it), 150 ms is."""
    sampler, fake = open_fake()
    rows = run_ticks(sampler, fake, 7, step_ns=50 * MS)
    got = [not math.isnan(r["sm_active"]) for r in rows]
    assert got == [False, False, False, True, False, False, True]
    assert fake.calls["nvmlGpmSampleGet"] == 3


def test_gpm_pair_timed_when_taken_not_by_the_tick():
    """A tick whose other calls ran long takes its GPM sample late: the pair is timed by the samples."""
    sampler, fake = open_fake()
    t0 = fake.fx["devices"][0]["ticks"][0]["t_ns"]
    fake.now_ns = t0 + 60 * MS  # the first tick's sample was taken 60 ms after the tick began
    sampler.sample(t0)
    fake.tick, fake.now_ns = 1, t0 + 150 * MS  # 150 ms of ticks, but only 90 ms between the samples
    assert math.isnan(sampler.sample(t0 + 110 * MS)[0]["sm_active"])
    fake.tick, fake.now_ns = 2, t0 + 170 * MS
    assert not math.isnan(sampler.sample(t0 + 160 * MS)[0]["sm_active"])


def test_failed_gpm_sample_starts_a_new_pair():
    """A transient nvmlGpmSampleGet failure must not leave a stale or reversed pair for the next tick."""
    sampler, fake = open_fake()
    fake.transient["nvmlGpmSampleGet"] = ["Unknown", 0]
    rows = []
    t0 = fake.fx["devices"][0]["ticks"][0]["t_ns"]
    for i in range(5):
        fake.tick, fake.now_ns = i, t0 + i * 150 * MS
        if i == 2:
            fake.transient["nvmlGpmSampleGet"][1] = 1
        rows.extend(sampler.sample(t0 + i * 150 * MS))
    got = [not math.isnan(r["sm_active"]) for r in rows]
    assert got == [False, True, False, False, True]  # after the failure: a fresh first sample, then a pair
    assert sampler.failures[(0, "nvmlGpmSampleGet")] == 1


def test_gpm_stops_when_metrics_fail_for_good():
    sampler, fake = open_fake()
    fake.transient["nvmlGpmMetricsGet"] = ["NotSupported", 1]
    orig = fake.nvmlGpmMetricsGet

    def metrics(mg):
        fake._enter("nvmlGpmMetricsGet")
        return orig(mg)

    fake.nvmlGpmMetricsGet = metrics
    run_ticks(sampler, fake, 6, step_ns=150 * MS)
    assert fake.calls["nvmlGpmSampleGet"] == 2  # no samples taken after the metrics call failed for good
    assert fake.freed == 2 and "GPM stopped" in sampler.disabled[0]["gpm"]


def test_not_supported_call_disabled_after_first_failure_and_counted():
    sampler, fake = open_fake(mutate=lambda fx: fx["devices"][0]["errors"].update(
        nvmlDeviceGetTemperature="NotSupported"))
    rows = run_ticks(sampler, fake, 10)
    assert fake.calls["nvmlDeviceGetTemperature"] == 1
    assert all(math.isnan(r["temp_c"]) for r in rows)
    assert sampler.failures[(0, "nvmlDeviceGetTemperature")] == 1
    assert sampler.disabled[0]["nvmlDeviceGetTemperature"] == "NVML NotSupported"
    assert all(r["power_w"] == pytest.approx(512.034, abs=5) for r in rows)  # the rest goes on


def test_not_supported_field_dropped_from_later_batches():
    sampler, fake = open_fake()
    run_ticks(sampler, fake, 5)
    assert 271 in fake.field_requests[0]
    assert all(271 not in req for req in fake.field_requests[1:])
    assert sampler.failures[(0, "field:271")] == 1
    assert "field:271" in sampler.disabled[0]


def test_transient_error_is_nan_once_and_retried():
    sampler, fake = open_fake()
    fake.transient["nvmlDeviceGetUtilizationRates"] = ["Timeout", 1]
    rows = run_ticks(sampler, fake, 3)
    assert math.isnan(rows[0]["util_gpu"]) and rows[1]["util_gpu"] == 91.0
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 3
    assert "nvmlDeviceGetUtilizationRates" not in sampler.disabled[0]


def test_gpu_lost_stops_asking():
    sampler, fake = open_fake()
    fake.transient["nvmlDeviceGetMemoryInfo"] = ["GpuIsLost", 1]
    rows = run_ticks(sampler, fake, 4)
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 1
    assert math.isnan(rows[2]["util_gpu"]) and rows[2]["energy_j"] != rows[2]["energy_j"]
    assert len(rows) == 4  # still one row per device per tick, so the gap is visible


# --------------------------------------------------------------------------- other cards
def test_old_driver_without_gpm_falls_back():
    sampler, fake = open_fake("v100_old_driver_synthetic.json")
    rows = run_ticks(sampler, fake, 4)
    hw = sampler.hardware()[0]
    assert hw["gpm_supported"] is False and hw["mig_mode"] is None and hw["compute_capability"] == "7.0"
    assert all(math.isnan(r["sm_active"]) for r in rows)
    assert fake.calls["nvmlGpmSampleGet"] == 0
    # the clocks-event name is missing on this driver: tried once, then the throttle-reasons name
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 4
    assert [r["clock_event_reasons"] for r in rows] == [pynvml.nvmlClocksEventReasonGpuIdle, 0, 0, 0]
    assert rows[0]["energy_j"] == pytest.approx(911_000.0)
    assert rows[0]["pcie_tx_bytes"] is None and math.isnan(rows[0]["power_instant_w"])
    assert rows[0]["throttle_power_ns"] == 0
    assert fake.field_requests[-1] == [83, 74, 76]  # unsupported fields no longer asked for
    assert (rows[0]["util_gpu"], rows[0]["power_w"]) == (34.0, 118.25)


def test_mig_enabled_utilization_nan_and_no_gpm():
    def mig(fx):
        fx["devices"][0]["static"]["mig_mode"] = [1, 1]
        fx["devices"][0]["errors"]["nvmlDeviceGetUtilizationRates"] = "NotSupported"
    sampler, fake = open_fake(mutate=mig)
    rows = run_ticks(sampler, fake, 3)
    assert all(math.isnan(r["util_gpu"]) and math.isnan(r["sm_active"]) for r in rows)
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 0
    assert sampler.hardware()[0]["mig_mode"] is True
    assert rows[0]["mem_used"] is not None


def test_two_devices_one_row_each():
    def two(fx):
        d = copy.deepcopy(fx["devices"][0])
        d["static"]["uuid"] = "GPU-second"
        fx["devices"].append(d)
    sampler, fake = open_fake(mutate=two)
    rows = run_ticks(sampler, fake, 3)
    assert [r["gpu"] for r in rows] == [0, 1] * 3
    assert [h["uuid"] for h in sampler.hardware()] == ["GPU-5f0c2b8e-7d1a-4c7e-9a43-2b6f1d0e9c11", "GPU-second"]
    sampler2, _ = open_fake(mutate=two, indices=[1])
    assert [h["index"] for h in sampler2.hardware()] == [1]


# --------------------------------------------------------------------------- static, processes, close
def test_hardware_facts():
    sampler, fake = open_fake()
    hw = sampler.hardware()
    assert hw == [{
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-5f0c2b8e-7d1a-4c7e-9a43-2b6f1d0e9c11",
        "pci_bus_id": "00000000:18:00.0", "memory_total": 85520809984, "power_limit_w": 700.0,
        "max_sm_clock_mhz": 1980, "max_mem_clock_mhz": 2619, "driver_version": "550.90.07",
        "cuda_driver_version": "12.4", "compute_capability": "9.0", "gpm_supported": True, "mig_mode": False,
    }]
    n = sum(fake.calls.values())
    sampler.hardware()
    assert sum(fake.calls.values()) == n  # cached: the recorder asks every second


def test_process_memory():
    sampler, fake = open_fake()
    rows = sampler.sample_processes(123)
    assert rows == [
        {"t_ns": 123, "gpu": 0, "pid": 41233, "used_mem": int(70.9 * GiB)},
        {"t_ns": 123, "gpu": 0, "pid": 41377, "used_mem": 536870912},
    ]
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 1
    to_batch(rows, GPU_PROCS_SCHEMA)


def test_process_memory_not_available_is_null():
    sampler, fake = open_fake(mutate=lambda fx: fx["devices"][0].update(processes=[[7, None]]))
    assert sampler.sample_processes(1)[0]["used_mem"] is None


def test_close_frees_gpm_samples_and_shuts_down_once():
    sampler, fake = open_fake()
    run_ticks(sampler, fake, 2)
    sampler.close()
    sampler.close()
    assert fake.freed == 2 and fake.shutdown == 1


# --------------------------------------------------------------------------- every fixture, incl. recorded ones
@pytest.mark.parametrize("name", [n for n in all_fixtures() if not load(n).get("init_error")])
def test_rows_fit_schema_for_every_fixture(name):
    fx = load(name)
    sampler, fake = open_fake(name)
    n_ticks = len(fx["devices"][0]["ticks"])
    rows = run_ticks(sampler, fake, n_ticks)
    assert len(rows) == n_ticks * len(fx["devices"])
    batch = to_batch(rows, GPU_SCHEMA)
    assert batch.schema == GPU_SCHEMA and batch.num_rows == len(rows)
    t = pa.Table.from_batches([batch])
    util = [u for u in t["util_gpu"].to_pylist() if u == u]
    assert all(0 <= u <= 100 for u in util)
    for dev in range(len(fx["devices"])):
        energy = [r["energy_j"] for r in rows if r["gpu"] == dev and r["energy_j"] == r["energy_j"]]
        assert energy == sorted(energy)  # a cumulative counter
    for r in rows:
        assert r["mem_used"] is None or 0 <= r["mem_used"] <= r["mem_total"]
        assert math.isnan(r["power_w"]) or 0 < r["power_w"] < 2000


def test_fields_nvml_timed_as_slow_are_read_once_a_second_and_on_the_last_tick():
    """Recorded on an H200 (driver 580.159.04): the field batch cost 4.3 ms of CPU a tick, field 83 (energy)
    3-4 ms of it by NVML's own latencyUsec, 75/270/271 0.25-0.7 ms. After the first tick those are read once a
    second; the cheap ones every tick; ``all_fields`` (the recorder's last tick) reads them all. The run's
    energy from the sparse readings equals the energy of the same readings taken every tick at those times."""
    from gpusleuth.recorder.nvml import SLOW_FIELD_US

    sampler, fake = open_fake("h200_580.159.04.json.gz")
    slow = {int(fid) for fid, v in fake.fx["devices"][0]["ticks"][0]["fields"].items() if v[3] >= SLOW_FIELD_US}
    assert {83, 75} <= slow and 186 not in slow
    rows = run_ticks(sampler, fake, 25)  # 2.5 s at 10 Hz
    asked = [set(r) for r in fake.field_requests]
    assert asked[0] >= slow  # the first batch reads everything (and learns what is slow)
    full = [i for i, a in enumerate(asked) if a >= slow]
    assert full == [0, 10, 20], full  # then once a second
    assert all(186 in a for a in asked)  # the instant power every tick
    energy = [r["energy_j"] for r in rows]
    assert [i for i, e in enumerate(energy) if e == e and e is not None] == [0, 10, 20]
    fake.tick, fake.now_ns = 24, fake.now_ns + 50 * MS
    last = sampler.sample(fake.now_ns, all_fields=True)
    assert set(fake.field_requests[-1]) >= slow and last[0]["energy_j"] == last[0]["energy_j"]


def test_a_driver_where_every_field_is_cheap_reads_them_all_every_tick():
    sampler, fake = open_fake("h100_synthetic.json")
    run_ticks(sampler, fake, 5)
    second = set(fake.field_requests[1])  # after the first, a field this driver lacks (75) is dropped
    assert 83 in second and all(set(a) == second for a in fake.field_requests[1:])
