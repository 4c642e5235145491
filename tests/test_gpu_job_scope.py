"""The job's GPUs only, MIG slices and old drivers, end to end (issue 24, defects 3, 4, 6, 7).

A real recording (tests/fixtures/rundir/finished: 60 SGD steps recorded by ``gpusleuth run`` on a CPU box)
gets GPU telemetry from the NVML stand-in of ``test_nvml_sampler`` (the sampler's real code), fed with
the values of real nvidia-smi captures (tests/fixtures/nvidia-smi, nvidia_gpu_exporter, MIT): an H100
idle and under load, and an H200 in MIG mode with five instances. The report is made by the real CLI.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pynvml
import pytest

from gpusleuth.recorder.nvml import NvmlSampler
from gpusleuth.recorder.nvml_codes import mig_index
from gpusleuth.recorder.schemas import GPU_PROCS_SCHEMA, GPU_SCHEMA, to_batch
from test_nvml_sampler import FakeNvml

FIX = Path(__file__).parent / "fixtures"
SMI = FIX / "nvidia-smi"
RUN = FIX / "rundir" / "finished"
MiB = 1 << 20
MS = 1_000_000
SRC = str(Path(__file__).resolve().parents[1] / "src")


# ------------------------------------------------------------------------------ reading the captures
def query_gpu(capture: str, phase: str) -> dict[str, str]:
    """One ``--query-gpu`` CSV row of a capture (``phase``: idle or load), header → value."""
    text = (SMI / capture).read_text()
    block = text.split(f"# {phase} :: query-gpu")[1].split("\n#####", 2)[1]
    lines = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]
    rows = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    return dict(zip(rows[0], rows[1]))


def number(v: str) -> float:
    return float(v.split()[0])


def h100(phase: str) -> dict:
    q = query_gpu("linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt", phase)
    return {"name": q["name"], "uuid": q["uuid"], "pci": q["pci.bus_id"],
            "power_w": number(q["power.draw [W]"]), "power_instant_w": number(q["power.draw.instant [W]"]),
            "limit_w": number(q["enforced.power.limit [W]"]), "util": number(q["utilization.gpu [%]"]),
            "mem_util": number(q["utilization.memory [%]"]), "mem_used": int(number(q["memory.used [MiB]"])) * MiB,
            "mem_total": int(number(q["memory.total [MiB]"])) * MiB, "temp": number(q["temperature.gpu"]),
            "sm_mhz": number(q["clocks.current.sm [MHz]"]), "max_sm_mhz": number(q["clocks.max.sm [MHz]"]),
            "reasons": int(q["clocks_event_reasons.active"], 16)}


def h200_mig() -> dict:
    """The H200 MIG capture: GPU power and name; per instance its profile, UUID, SMs and memory."""
    text = (SMI / "linux-x86_64__nvidia-h200-mig__590.48.01.txt").read_text()
    listing = re.findall(r"MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9a-f-]+)\)", text)
    q = text.split("# idle :: query (-q)")[1]
    blocks = q.split("    MIG Device\n")[1:]
    inst = []
    for (profile, slot, uuid), b in zip(listing, blocks):
        sms = int(re.search(r"Multiprocessor count\s+:\s+(\d+)", b).group(1))
        total = int(re.search(r"Shared FB Memory Usage\s+Total\s+:\s+(\d+) MiB", b).group(1))
        used = int(re.search(r"Shared FB Memory Usage\s+Total\s+:\s+\d+ MiB\s+Reserved\s+:\s+\d+ MiB\s+"
                             r"Used\s+:\s+(\d+) MiB", b).group(1))
        inst.append({"profile": profile, "slot": int(slot), "uuid": uuid, "sms": sms, "mem_total": total * MiB,
                     "mem_used": used * MiB})
    gpu = re.search(r"GPU 0: (NVIDIA [^(]+?) \(UUID: (GPU-[0-9a-f-]+)\)", text)
    power = re.search(r"\|\s+N/A\s+(\d+)C\s+P0\s+(\d+)W /\s+(\d+)W", text)
    return {"name": gpu.group(1), "uuid": gpu.group(2), "temp": float(power.group(1)),
            "power_w": float(power.group(2)), "limit_w": float(power.group(3)), "instances": inst}


# ------------------------------------------------------------------------------ the stand-in
def device(v: dict, *, uuid: str, pci: str, t0: int, n: int, step_ns: int, mig=None, fields_ret=0) -> dict:
    """A stand-in device replaying one captured reading for ``n`` ticks; the energy counter grows with the
    captured power (NVML's counter is the integral of power)."""
    ticks = []
    energy_mj = 3_000_000_000
    for i in range(n):
        f = {fid: [fields_ret, 3, 0, 14] for fid in ("74", "76", "269", "270", "271", "197", "198")}
        f["75"] = [0, 3, 0, 14]
        f["83"] = [0, 3, int(energy_mj), 14]
        f["186"] = [0, 1, int(v.get("power_instant_w", v["power_w"]) * 1000), 14]
        ticks.append({"t_ns": t0 + i * step_ns, "util": [v.get("util", 0), v.get("mem_util", 0)],
                      "memory": [v.get("mem_total", 0), v.get("mem_used", 0), 0], "power_mw": int(v["power_w"] * 1000),
                      "temp_c": v["temp"], "clock": {"1": v.get("sm_mhz", 1980), "2": 2619},
                      "clock_event_reasons": v.get("reasons", 0), "fields": f, "gpm": None})
        energy_mj += v["power_w"] * step_ns / 1e6
    return {"static": {"name": v["name"], "uuid": uuid, "pci_bus_id": pci, "power_limit_mw": int(v["limit_w"] * 1000),
                       "max_clock": {"1": v.get("max_sm_mhz", 1980), "2": 2619}, "compute_capability": [9, 0],
                       "mig_mode": [1, 1] if mig else [0, 0], "gpm_supported": False},
            "errors": {}, "ticks": ticks, "processes": [], "mig": mig or []}


class MigNvml(FakeNvml):
    """The stand-in, plus MIG instances (handles are ``(parent, slot)``)."""

    def _dev(self, h):
        if isinstance(h, tuple):
            parent, slot = h
            return next(m for m in self.fx["devices"][parent]["mig"] if m["slot"] == slot)
        return self.fx["devices"][h]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, slot):
        if not any(m["slot"] == slot for m in self.fx["devices"][h]["mig"]):
            raise pynvml.NVMLError_NotFound()
        return (h, slot)

    def nvmlDeviceGetName(self, h):
        if isinstance(h, tuple):
            return self._dev(h)["name"]
        return super().nvmlDeviceGetName(h)

    def nvmlDeviceGetUUID(self, h):
        if isinstance(h, tuple):
            return self._dev(h)["uuid"]
        return super().nvmlDeviceGetUUID(h)

    def nvmlDeviceGetMemoryInfo(self, h):
        if isinstance(h, tuple):
            m = self._dev(h)
            return type("M", (), {"total": m["mem_total"], "used": m["mem_used"], "free": 0})()
        return super().nvmlDeviceGetMemoryInfo(h)

    def nvmlDeviceGetAttributes_v2(self, h):
        m = self._dev(h)
        return type("A", (), {"multiprocessorCount": m["sms"], "gpuInstanceSliceCount": 0,
                              "computeInstanceSliceCount": 0})()

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        if isinstance(h, tuple):
            return [type("P", (), {"pid": p, "usedGpuMemory": u})() for p, u in self._dev(h)["processes"]]
        return super().nvmlDeviceGetComputeRunningProcesses(h)


def record(tmp_path: Path, fx: dict, env: dict | None = None) -> Path:
    """The real recording with ``fx``'s GPUs sampled over its window: gpu/gpu_procs tables and the
    recorder's hardware and diagnostics in meta.json, as the recorder writes them."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    meta = json.loads((run / "meta.json").read_text())
    fake = MigNvml(fx)
    sampler, reason = NvmlSampler.open(fake, clock=lambda: fake.now_ns)
    assert reason is None
    t0, t1 = meta["start_ns"], meta["end_ns"]
    n = len(fx["devices"][0]["ticks"])
    rows, procs = [], []
    for i in range(n):
        t = t0 + i * 100 * MS
        fake.tick, fake.now_ns = i, t
        rows.extend(sampler.sample(t))
        if i % 10 == 0:
            procs.extend(sampler.sample_processes(t))
    assert t0 + (n - 1) * 100 * MS <= t1
    pq.write_table(pa.Table.from_batches([to_batch(rows, GPU_SCHEMA)]), run / "gpu.parquet")
    pq.write_table(pa.Table.from_batches([to_batch(procs, GPU_PROCS_SCHEMA)]), run / "gpu_procs.parquet")
    meta["recorder"]["gpu"] = sampler.hardware()
    meta["recorder"]["gpu_diagnostics"] = sampler.diagnostics()
    meta["env"] = env or {}
    (run / "meta.json").write_text(json.dumps(meta))
    return run


def report(run: Path, *extra: str, cli: bool = False) -> dict:
    """The report's JSON: from the real CLI in a child (``cli``), else the same pipeline in this process."""
    if cli:
        env = {**os.environ, "PYTHONPATH": SRC}
        out = subprocess.run([sys.executable, "-m", "gpusleuth", "report", str(run), "--json", *extra],
                             capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout)
    from gpusleuth.analysis.options import AnalysisOptions
    from gpusleuth.pipeline.build import build_report
    from gpusleuth.sources.rundir import load_run

    flags = dict(zip(extra[::2], extra[1::2]))
    opts = AnalysisOptions(price_per_gpu_hour=float(flags["--price-per-gpu-hour"]) if "--price-per-gpu-hour" in flags
                           else None,
                           flops_per_step=float(flags["--flops-per-step"]) if "--flops-per-step" in flags else None)
    return json.loads(json.dumps(build_report(load_run(run), opts, display=False).to_dict()))


def job_pid(run: Path) -> int:
    return int(pq.read_table(run / "steps.parquet").column("pid")[0].as_py())


def window_ticks() -> int:
    meta = json.loads((RUN / "meta.json").read_text())
    return int((meta["end_ns"] - meta["start_ns"]) // (100 * MS))


# ------------------------------------------------------------------------------ the tests
def two_h100s(pid: int | None) -> dict:
    meta = json.loads((RUN / "meta.json").read_text())
    n, t0 = window_ticks(), meta["start_ns"]
    idle, load = h100("idle"), h100("load")
    fx = {"format": "gpusleuth-nvml-fixture/1", "init_error": None,
          "system": {"driver_version": "590.48.01", "cuda_driver_version": 13010},
          "devices": [device(idle, uuid=idle["uuid"], pci=idle["pci"], t0=t0, n=n, step_ns=100 * MS),
                      # the second GPU: the same capture under load, with a UUID and bus of its own
                      device(load, uuid="GPU-00000000-0000-0000-0000-000000000001", pci="00000000:00:0A.0",
                             t0=t0, n=n, step_ns=100 * MS)]}
    if pid is not None:
        fx["devices"][1]["processes"] = [[pid, load["mem_used"]]]
    # start-up (imports, before the first step): GPU 1 does nothing yet, as in the idle capture
    first = int(pq.read_table(RUN / "steps.parquet").column("start_ns").to_numpy().min())
    for t in fx["devices"][1]["ticks"]:
        if t["t_ns"] < first:
            t["util"] = [idle["util"], idle["mem_util"]]
    return fx


@pytest.mark.process
def test_two_gpus_job_on_gpu_1_reports_gpu_1_only(tmp_path):
    pid = job_pid(RUN)
    run = record(tmp_path, two_h100s(pid), {})
    r = report(run, "--price-per-gpu-hour", "4", cli=True)
    load = h100("load")
    assert [g["index"] for g in r["gpu"]] == [1]
    scope = r["gpu_scope"]
    assert scope["job_gpus"] == [1] and scope["not_the_jobs"] == [0] and scope["decided"]
    assert "NVML's process list" in scope["how"]
    o = r["outcomes"]
    span = (window_ticks() - 1) * 0.1
    assert o["energy"]["gpus"] == 1
    assert o["energy"]["run_j"] == pytest.approx(load["power_w"] * span, rel=0.01)  # GPU 1's 632 W, not + GPU 0's 70 W
    assert o["cost"]["gpus"] == 1 and o["gpus_used"] == 1 and o["gpu_model"] == "H100 SXM"
    assert not [f["title"] for f in r["findings"] if re.search(r"\bGPU 0\b", f["title"])]
    # utilization over the steps' window (defect 5): the start-up zeros do not dilute it
    assert r["gpu"][0]["window"] == "steps" and r["gpu"][0]["util_gpu"]["mean"] == 100.0
    ticks = two_h100s(pid)["devices"][1]["ticks"]
    assert any(t["util"][0] == 0 for t in ticks)  # there were zeros to leave out


def test_container_pids_matched_through_nspid(tmp_path):
    """Inside a container the job's processes have other PIDs than the ones NVML reports (the host's).
    The recorder's NSpid column names both; the process list then still says GPU 1."""
    pid = job_pid(RUN)
    host_pid = pid + 400_000
    run = record(tmp_path, two_h100s(host_pid), {})
    procs = pq.read_table(run / "procs.parquet")
    nspid = pa.array([host_pid if p == pid else None for p in procs.column("pid").to_pylist()], pa.int64())
    pq.write_table(procs.append_column("nspid", nspid), run / "procs.parquet")
    r = report(run)
    assert r["gpu_scope"]["job_gpus"] == [1] and "NVML's process list" in r["gpu_scope"]["how"]


def test_no_pid_match_falls_back_to_cuda_visible_devices_then_says_it_cannot_tell(tmp_path):
    run = record(tmp_path, two_h100s(None), {"CUDA_VISIBLE_DEVICES": "GPU-00000000-0000-0000-0000-000000000001"})
    r = report(run)
    assert r["gpu_scope"]["job_gpus"] == [1] and "CUDA_VISIBLE_DEVICES" in r["gpu_scope"]["how"]
    run2 = record(tmp_path / "b", two_h100s(None), {})
    r2 = report(run2)
    s = r2["gpu_scope"]
    assert s["job_gpus"] == [0, 1] and not s["decided"] and "could not tell" in s["how"]


def test_mig_slice_reported_with_mfu_against_the_slice(tmp_path):
    cap = h200_mig()
    meta = json.loads((RUN / "meta.json").read_text())
    n, t0 = window_ticks(), meta["start_ns"]
    mig = [{"slot": m["slot"], "name": f"{cap['name']} MIG {m['profile']}", "uuid": m["uuid"], "sms": m["sms"],
            "mem_total": m["mem_total"], "mem_used": m["mem_used"], "processes": []} for m in cap["instances"]]
    job = next(m for m in mig if m["name"].endswith("MIG 2g.35gb"))
    job["processes"] = [[job_pid(RUN), 20 * 1024 * MiB]]
    fx = {"format": "gpusleuth-nvml-fixture/1", "init_error": None,
          "system": {"driver_version": "590.48.01", "cuda_driver_version": 13010},
          "devices": [device({"name": cap["name"], "power_w": cap["power_w"], "limit_w": cap["limit_w"],
                              "temp": cap["temp"]}, uuid=cap["uuid"], pci="00000000:83:00.0", t0=t0, n=n,
                             step_ns=100 * MS, mig=mig)]}
    run = record(tmp_path, fx, {})
    flops = 5e12
    r = report(run, "--flops-per-step", str(flops))
    idx = mig_index(0, job["slot"])
    assert [g["index"] for g in r["gpu"]] == [idx]
    g = r["gpu"][0]
    assert g["name"] == "NVIDIA H200 MIG 2g.35gb" and g["sm_count"] == 32 and g["mig_parent"] == 0
    assert g["mem_total_bytes"] == 33280 * MiB
    assert "power" in g["empty"] and "whole GPU" in g["empty"]["power"]
    mfu = r["outcomes"]["mfu"]
    slice_peak = 989 * 32 / 132
    assert mfu["peak"]["tflops"] == pytest.approx(slice_peak)
    step = r["outcomes"]["throughput"]["step_time_p50_s"]
    assert mfu["mfu"] == pytest.approx(flops / step / 1e12 / slice_peak, rel=1e-6)
    assert r["gpu_scope"]["job_gpus"] == [idx]


def test_old_driver_fields_and_library_mismatch(tmp_path):
    """R535–R570: fields 269–271 and 197/198 answer INVALID_ARGUMENT; a pre-R510 library lacks a versioned
    function (pynvml raises NVMLLibraryMismatchError, not an NVMLError). Both are switched off once, said
    why, and the thermal counter falls back to field 75."""
    fx = two_h100s(job_pid(RUN))
    for d in fx["devices"]:
        for t in d["ticks"]:
            for fid in ("269", "270", "271", "197", "198"):
                t["fields"][fid] = [pynvml.NVML_ERROR_INVALID_ARGUMENT, 0, 0, 0]
    fake = MigNvml(fx)

    def mismatch(h):
        fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] += 1
        raise pynvml.NVMLLibraryMismatchError("Unversioned function called")

    fake.nvmlDeviceGetCurrentClocksEventReasons = mismatch
    sampler, _ = NvmlSampler.open(fake, clock=lambda: fake.now_ns)
    for i in range(5):
        fake.tick = i
        rows = sampler.sample(fx["devices"][0]["ticks"][i]["t_ns"])
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 2  # once per GPU, then off
    assert rows[1]["throttle_thermal_policy_ns"] == 0 and rows[1]["throttle_thermal_ns"] is None
    d = sampler.diagnostics()["1"]["disabled"]
    assert "NVMLLibraryMismatchError" in d["nvmlDeviceGetCurrentClocksEventReasons"]
    assert d["field:269"] == "throttle_thermal_ns: NVML InvalidArgument"
    assert all(269 not in req for req in fake.field_requests[2:])


@pytest.mark.process
def test_recorder_reads_the_container_pid_of_a_process_in_its_own_pid_namespace():
    """A real PID namespace (``unshare --pid --fork``, as a container runtime makes one): the sampler's row
    for the process inside carries its inner PID (1) beside the PID NVML would report."""
    import shutil as sh
    import time

    from gpusleuth.recorder.procs import ProcessTreeSampler

    if sh.which("unshare") is None:
        pytest.skip("no unshare(1) on this machine")
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c", "import time; time.sleep(20)"],
                         stderr=subprocess.PIPE)
    try:
        time.sleep(0.5)
        if p.poll() is not None:
            pytest.skip(f"unshare --pid not permitted here: {p.stderr.read().decode()[-200:]}")
        s = ProcessTreeSampler(p.pid)
        rows = []
        for _ in range(20):
            rows = s.sample(time.time_ns())
            if any(r["name"].startswith("python") for r in rows):
                break
            time.sleep(0.1)
        inner = [r for r in rows if r["name"].startswith("python")]
        assert inner and inner[0]["nspid"] == 1 and inner[0]["pid"] != 1
        assert all(r["nspid"] is None for r in rows if r["pid"] == p.pid)  # unshare itself: our namespace
        s.close()
    finally:
        p.kill()
        p.wait()


def test_throttling_per_reason_on_an_r550_driver(tmp_path):
    """R535–R570: the power-cap counter (74) works, the thermal counters (269–271) answer INVALID_ARGUMENT.
    A thermal slowdown then shows only in the clock-event bit; the fallback used to run only when no
    counter moved at all, so a power-cap counter that moved hid every thermal event."""
    fx = two_h100s(job_pid(RUN))
    ticks = fx["devices"][1]["ticks"]
    for i, t in enumerate(ticks):
        for fid in ("269", "270", "271"):
            t["fields"][fid] = [pynvml.NVML_ERROR_INVALID_ARGUMENT, 0, 0, 0]
        t["fields"]["75"] = [pynvml.NVML_ERROR_NOT_SUPPORTED, 0, 0, 0]  # no thermal counter of any kind
        t["fields"]["74"] = [0, 3, i * 10 * MS, 14]  # power cap held 10 ms of every 100 ms
        t["clock_event_reasons"] = pynvml.nvmlClocksEventReasonSwThermalSlowdown if i % 2 else 0
    run = record(tmp_path, fx)
    g = report(run)["gpu"][0]
    assert g["throttled_share"]["sw_power_cap"] == pytest.approx(0.1, rel=0.02)  # from its counter
    assert g["throttled_share"]["sw_thermal"] == pytest.approx(0.5, abs=0.02)  # from its bit
    assert "hw_thermal" not in g["throttled_share"]


def test_console_and_html_say_which_gpus_were_the_jobs(tmp_path):
    """The decision is shown where the user reads the report, not only in the JSON."""
    from rich.console import Console

    from gpusleuth.pipeline.build import build_report
    from gpusleuth.render.console import render_console
    from gpusleuth.render.html import render_html
    from gpusleuth.sources.rundir import load_run

    rep = build_report(load_run(record(tmp_path, two_h100s(job_pid(RUN)))), display=False)
    con = Console(record=True, width=200, file=io.StringIO())
    render_console(rep, con)
    text = con.export_text()
    assert "the job's GPUs — NVML's process list" in text and "not the job's (left out): 0" in text
    html = render_html(rep)
    assert "The job&#x27;s GPUs" in html or "The job's GPUs" in html
