"""The GPU side of a report, end to end from NVML readings to findings.

No GPU here: the NVML boundary is the pynvml stand-in of test_nvml_sampler.py, replaying fixture values
(synthetic for now; to be replaced by recordings from scripts/gpu_check.py). Everything after the
boundary — the sampler, the Arrow stream, finalization, loading, analysis, rules, JSON — is the real code.
"""

from __future__ import annotations

import json

import pytest

from gpusleuth.recorder.schemas import GPU_SCHEMA, HOST_SCHEMA, PROCS_SCHEMA
from gpusleuth.pipeline.build import build_report
from gpusleuth.recorder.finalize import finalize_run_dir
from gpusleuth.sources.rundir import load_run
from gpusleuth.run.meta import write_meta
from gpusleuth.run.streams import TableStreamWriter
from test_nvml_sampler import GiB, MS, open_fake, run_ticks

MAIN_PID = 4242


def make_run(tmp_path, mutate=None, main_cpu=20.0, ticks=6):
    sampler, fake = open_fake(mutate=mutate)
    rows = run_ticks(sampler, fake, ticks)
    t0 = rows[0]["t_ns"]
    t_end = rows[-1]["t_ns"]
    run_dir = tmp_path / "run"
    (run_dir / "raw").mkdir(parents=True)
    write_meta(run_dir, {"source": "recorder", "command": ["python", "train.py"], "start_ns": t0,
                         "end_ns": t_end, "exit_code": 0,
                         "recorder": {"gpu": sampler.hardware(), "host": {"logical_cores": 8}}})
    w = TableStreamWriter(run_dir / "gpu.arrows", GPU_SCHEMA)
    w.extend(rows)
    w.close()
    w = TableStreamWriter(run_dir / "procs.arrows", PROCS_SCHEMA)
    for i in range(ticks):
        w.append({"t_ns": t0 + i * 100 * MS, "pid": MAIN_PID, "ppid": 1, "name": "python",
                  "cpu_pct": main_cpu, "rss_bytes": 2 * GiB, "num_threads": 4, "status": "sleeping"})
    w.close()
    w = TableStreamWriter(run_dir / "host.arrows", HOST_SCHEMA)
    for i in range(ticks):
        w.append({"t_ns": t0 + i * 100 * MS, "cpu_pct": 10.0, "iowait_pct": 0.0})
    w.close()
    # five 100 ms steps with 1 ms of data wait each
    lines = [f"H\t{json.dumps({'pid': MAIN_PID, 'role': 'main', 'argv': ['train.py']})}"]
    for k in range(5):
        s = t0 + k * 100 * MS
        lines.append(f"S\t{s}\t{s + 100 * MS}\t{MS}\t{MS // 2}\t64\t{2 * MS}\t1\to")
    (run_dir / "raw" / f"events-{MAIN_PID}.tsv").write_text("\n".join(lines) + "\n")
    assert finalize_run_dir(run_dir, t_end) == []
    return load_run(run_dir)


def test_gpu_summary_from_nvml_readings(tmp_path):
    report = build_report(make_run(tmp_path))
    (g,) = report.gpus
    assert g.name == "NVIDIA H100 80GB HBM3"
    assert g.util_gpu["p50"] == pytest.approx(87, abs=15)
    assert g.mem_total_bytes / GiB == pytest.approx(79.6, abs=0.1)
    assert g.energy_j == pytest.approx(512.0 * 0.5, rel=1e-6)  # 5 intervals of 100 ms at 512 W
    assert g.power_w["mean"] == pytest.approx(512, rel=0.05)
    assert g.sm_active is not None and g.tensor_active is not None  # GPM on Hopper
    assert "sw_power_cap" in g.throttled_share  # from the cumulative counter, not the flag
    d = report.to_dict()
    json.dumps(d, allow_nan=False)
    assert d["gpu"][0]["energy_j"] == pytest.approx(256.0)
    # busy H100 near full memory: neither GPU rule fires, and nothing is "not evaluated" for lack of a GPU
    assert not [f for f in report.findings if f.cause in ("sync", "batch.too_small")]
    assert not [m for m in report.not_evaluated if "GPU telemetry" in m.needs]


def _idle_small(fx):
    for tick in fx["devices"][0]["ticks"]:
        tick["util"] = [22, 5]
        total = tick["memory"][0]
        tick["memory"] = [total, 12 * GiB, total - 12 * GiB]


def test_idle_gpu_with_idle_cpu_and_memory_headroom(tmp_path):
    report = build_report(make_run(tmp_path, mutate=_idle_small, main_cpu=20.0))
    causes = {f.cause: f for f in report.findings}
    assert causes["sync"].severity == "high"  # 22 % util, 20 % CPU, no data wait
    assert "--profile-steps" in causes["sync"].fix
    headroom = causes["batch.too_small"]
    assert "4×" in headroom.title  # 12 GiB of 79.6 → room for 4× (power of two ≤ 0.8/0.15)
    assert "learning" in headroom.fix and "accumulation" in headroom.fix


def test_busy_cpu_is_not_called_a_sync_problem(tmp_path):
    report = build_report(make_run(tmp_path, mutate=_idle_small, main_cpu=100.0))
    assert "sync" not in {f.cause for f in report.findings}
