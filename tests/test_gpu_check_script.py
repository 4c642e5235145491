"""``scripts/gpu_check.py`` — the one command a developer runs on a real GPU machine.

It can only truly run on a GPU, so here we test what can go wrong before it gets there: on a machine
without a GPU it must exit 2 with one clear line (not a traceback, not a half-written output folder), and
its raw-NVML recording must produce fixtures that the tests' stand-in replays into exactly the rows the
sampler produced live — checked by recording *through* the stand-in fed with the synthetic fixtures.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpusleuth.recorder.nvml import NvmlSampler
from test_nvml_sampler import FakeNvml, all_fixtures, load

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "gpu_check.py"


def import_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gpu_check = import_script()


def _has_gpu() -> bool:
    sampler, _ = NvmlSampler.open()
    if sampler is not None:
        sampler.close()
        return True
    return False


@pytest.mark.process
@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU: the no-GPU path can't be observed")
def test_no_gpu_exits_2_with_one_line(tmp_path):
    out = tmp_path / "out"
    res = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu_check: no GPU"), res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists()  # nothing half-written
    assert not (tmp_path / "gpu_check_out").exists()


def record_through_stand_in(fx: dict, transient: dict | None = None):
    """What gpu_check does on a GPU, with the stand-in as the 'driver': rows seen live and the fixture."""
    fake = FakeNvml(json.loads(json.dumps(fx)))
    fake.transient.update(transient or {})
    rec = gpu_check.RecordingNvml(fake)
    sampler, reason = NvmlSampler.open(rec)
    assert reason is None
    sampler.hardware()
    rows = []
    for k, t in enumerate(fx["devices"][0]["ticks"]):
        fake.tick = k
        rec.tick(t["t_ns"])
        rows.extend(sampler.sample(t["t_ns"]))
    procs = sampler.sample_processes(0)
    sampler.close()
    return rows, procs, rec.fixture(note="test", recorded_with={"script": "test"})


@pytest.mark.parametrize("name", [n for n in all_fixtures() if not load(n).get("init_error")])
def test_recording_replays_to_the_same_rows(name, tmp_path):
    fx = load(name)
    rows, procs, new = record_through_stand_in(fx)
    assert new["format"] == "gpusleuth-nvml-fixture/1" and new["synthetic"] is False
    assert new["system"] == fx["system"] and new["init_error"] is None
    for a, b in zip(fx["devices"], new["devices"]):
        assert b["static"] == a["static"]
        assert b["errors"] == a["errors"]  # e.g. the old driver's FunctionNotFound / NotSupported
        assert b["processes"] == a["processes"]
        assert len(b["ticks"]) == len(a["ticks"])
    # written gzipped, read back the way tests/test_nvml_sampler.py loads fixtures
    path = tmp_path / "rec.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(new, f)
    with gzip.open(path, "rt") as f:
        back = json.load(f)
    replayed, replayed_procs = gpu_check.replay(back, FakeNvml)
    assert gpu_check.same_rows(rows, replayed) == []
    assert replayed_procs == procs


def test_transient_error_is_filled_from_a_neighbour_and_counted():
    fx = load("h100_synthetic.json")
    rows, _, new = record_through_stand_in(fx, {"nvmlDeviceGetUtilizationRates": ["Timeout", 1]})
    assert new["recorded_with"]["transient_errors"] == {"gpu0:nvmlDeviceGetUtilizationRates:Timeout": 1}
    ticks = new["devices"][0]["ticks"]
    assert ticks[0]["util"] == ticks[1]["util"]  # tick 0 had no reading: the nearest one stands in
    assert "nvmlDeviceGetUtilizationRates" not in new["devices"][0]["errors"]  # not a permanent error
    replayed, _ = gpu_check.replay(new, FakeNvml)
    assert gpu_check.same_rows(rows, replayed) == [f"row 0 util_gpu: live nan replay {float(ticks[0]['util'][0])!r}",
                                                   f"row 0 util_mem: live nan replay {float(ticks[0]['util'][1])!r}"]


def test_script_finds_the_stand_in_for_its_self_check():
    assert gpu_check.load_fake_nvml() is not None


@pytest.mark.process  # the CUDA probe runs in a child, as it must on a GPU (a broken CUDA can abort it)
def test_whole_script_against_the_stand_in(tmp_path, monkeypatch, capsys):
    """Every phase of ``main`` (but the demo run) against the stand-in posing as ``pynvml``: a GPU session
    is scarce, so a typo in a rarely-run branch must be caught here, not there."""
    fake = FakeNvml(load("h100_synthetic.json"))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    orig_tick = gpu_check.RecordingNvml.tick

    def tick(self, t_ns):  # the "driver" moves on one fixture reading per 10 Hz tick
        fake.tick = len(next(iter(self.devices.values()))["ticks"])
        orig_tick(self, t_ns)

    monkeypatch.setattr(gpu_check.RecordingNvml, "tick", tick)
    out = tmp_path / "out"
    rc = gpu_check.main(["--out", str(out), "--skip-run", "--calls", "5", "--load-seconds", "1",
                         "--periods-seconds", "0.2"])
    text = capsys.readouterr().out
    report = json.loads((out / "gpu_check.json").read_text())
    status = {c["name"]: c["status"] for c in report["checks"]}
    # the stand-in's counters stand still between ticks, so the update-period probe rightly fails; and
    # this machine's torch has no CUDA: the check FAILS there (never a SKIP that passes), and so do the
    # load, the profiler probe, the planted scenarios and the stall signature (issue 33) that need it
    assert [n for n, st in status.items() if st == "FAIL"] == [
        "CUDA usable from torch", "matmul load", "energy counter moves", "profiler probe",
        "planted GPU scenarios", "stall signature on the GPU"], text
    assert rc == 1 and "gpu_check: FAIL (6 failed" in text
    assert "has no usable CUDA" in report["cuda"]["why"] or "not installed" in report["cuda"]["why"]
    # NVML's answer per field id, as the driver gave it (the synthetic H100 lacks field 271)
    assert report["field_returns"]["0"]["271"] == "NOT_SUPPORTED"
    assert report["field_returns"]["0"]["83"] == "SUCCESS"
    assert status["fixture replay gives the live rows"] == "PASS"
    assert status["fixture replay: processes"] == "PASS"
    assert status["energy_j rises monotonically"] == "PASS"
    fx_files = list(out.glob("*.json.gz"))
    assert [p.name for p in fx_files] == ["h100_80gb_hbm3_550.90.07.json.gz"]
    with gzip.open(fx_files[0], "rt") as f:
        fx = json.load(f)
    assert len(fx["devices"][0]["ticks"]) == 10 and fx["timings"]["call_latency"]
    # calls the stand-in lacks (e.g. nvmlDeviceGetTotalEnergyConsumption) are reported, not fatal
    assert any("error" in v for v in report["call_latency"].values())


def test_probe_reading_of_a_real_h100_trace():
    """The probe's reading (each kernel with its launch and class) on TraceLens's H100 bf16 trace: judged
    as the bf16 case it passes, as the fp16 or TF32 case it fails — the judgement can fail."""
    t = gpu_check.probe_table(REPO / "tests" / "fixtures" / "tracelens" / "h100_qwen1.5_0.5b.json.gz")
    gemms = [r for r in t["rows"] if r["class"].startswith("gemm")]
    assert gemms and all(r["launch"] in ("cudaLaunchKernelExC", "cudaLaunchKernel", "cuLaunchKernel")
                         for r in gemms)
    assert not t["launch_calls_not_known"]
    assert gpu_check.judge_probe("bf16", t)[0]
    assert not gpu_check.judge_probe("fp16", t)[0] and not gpu_check.judge_probe("fp32_tf32_on", t)[0]
    assert not gpu_check.judge_probe("tiny_kernels", t)[0]


PROBE_FIXTURES = REPO / "tests" / "fixtures" / "gpu_check" / "traces"


@pytest.mark.parametrize("path", sorted(PROBE_FIXTURES.glob("*.json.gz")) or [None])
def test_recorded_probe_traces_read_as_made(path):
    """Traces that ``scripts/gpu_check.py`` recorded on a real GPU (OUT/fixtures/traces, copied to
    tests/fixtures/gpu_check/traces/): each case must read the way it was made, on every later change."""
    if path is None:
        pytest.skip("no probe traces recorded on a GPU yet: run scripts/gpu_check.py on one and copy "
                    "OUT/fixtures/traces/*.json.gz to tests/fixtures/gpu_check/traces/")
    case = path.name[: -len(".json.gz")]
    ok, detail = gpu_check.judge_probe(case, gpu_check.probe_table(path))
    assert ok, detail
