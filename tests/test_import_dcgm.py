"""DCGM / Prometheus: nvidia_gpu_exporter scrapes (real), dcgm-exporter text and query_range JSON (written
in the documented format: NVIDIA/dcgm-exporter @ d5e5f51 render_metrics.go; Prometheus HTTP API docs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import gpusleuth
from gpusleuth.errors import InputError
from gpusleuth.sources.detect import load_files, sniff
from gpusleuth.sources.prometheus import read_query_range, read_text_scrapes

FIX = Path(__file__).parent / "fixtures" / "dcgm"
IDLE = FIX / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__idle.metrics"
LOAD = FIX / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__load.metrics"
DEMO = FIX / "demo__seeded.metrics"
T0 = 1_779_000_000


def test_nvidia_gpu_exporter_scrapes_in_base_units(tmp_path):
    # time the two real scrapes by name, the documented `scrape-<epoch>.prom` convention
    a, b = tmp_path / f"scrape-{T0}.prom", tmp_path / f"scrape-{T0 + 30}.prom"
    shutil.copy(IDLE, a)
    shutil.copy(LOAD, b)
    assert sniff(a) == "prometheus-text"
    kind, runs = load_files([a, b])
    g = runs[0].gpu
    assert kind == "prometheus-text" and len(g) == 2
    assert g["t_ns"].tolist() == [T0 * 10**9, (T0 + 30) * 10**9]
    assert g["util_gpu"].tolist() == [0.0, 100.0]  # _ratio × 100
    assert g["sm_clock_mhz"][1] == pytest.approx(1980.0)  # _clock_hz ÷ 1e6
    assert g["power_w"][1] == pytest.approx(631.95)
    assert runs[0].meta["recorder"]["gpu"][0]["name"] == "NVIDIA H100 80GB HBM3"


def test_two_gpus_of_one_scrape_by_uuid():
    run = read_text_scrapes([DEMO])
    assert sorted(run.gpu["gpu"].tolist()) == [0, 1]
    uuids = {d["uuid"] for d in run.meta["recorder"]["gpu"]}
    assert uuids == {"1c67088e-9ecb-4564-bb97-6151ecc2ef64", "ef427e4f-1970-42f2-ab0c-ecf0e56a33b9"}
    assert any("one scrape is one instant" in x for x in run.losses)


DCGM_LINES = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:07:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",{host}="node-a"}} {u0}
DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-bbbb",pci_bus_id="00000000:0F:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",{host}="node-a"}} {u1}
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",{host}="node-a"}} 40000
DCGM_FI_DEV_FB_USED{{gpu="1",UUID="GPU-bbbb",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",{host}="node-a"}} 1000
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{{gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",{host}="node-a"}} 41559
DCGM_FI_DEV_FB_FREE{{gpu="1",UUID="GPU-bbbb",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",{host}="node-a"}} 80559
# HELP DCGM_FI_DEV_MEMORY_TEMP Memory temperature (in C).
# TYPE DCGM_FI_DEV_MEMORY_TEMP gauge
DCGM_FI_DEV_MEMORY_TEMP{{gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",{host}="node-a"}} 9223372036854775794
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{{gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",{host}="node-a"}} 9223372036854775794
DCGM_FI_DEV_GPU_TEMP{{gpu="1",UUID="GPU-bbbb",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",{host}="node-a"}} 41
# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned.
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{{gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",{host}="node-a"}} 0.120000
DCGM_FI_PROF_SM_ACTIVE{{gpu="1",UUID="GPU-bbbb",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",{host}="node-a"}} 0.000000
"""


@pytest.mark.parametrize("host_label", ["Hostname", "hostname"])
def test_dcgm_exporter_text_both_hostname_spellings_and_sentinels(tmp_path, host_label):
    p = tmp_path / f"dcgm-{T0}.prom"
    p.write_text(DCGM_LINES.format(host=host_label, u0=100, u1=0))
    assert sniff(p) == "prometheus-text"
    run = read_text_scrapes([p])
    g = run.gpu
    assert g["gpu"].tolist() == [0, 1]
    assert np.isnan(g["temp_c"][0]) and g["temp_c"][1] == 41  # INT64 NOT_SUPPORTED sentinel → null
    assert g["mem_total"][0] == (40000 + 41559) * 2**20
    assert g["sm_active"][0] == pytest.approx(12.0)
    assert run.meta["recorder"]["gpu"][0]["host"] == "node-a"


def query_range(n: int, step: float) -> dict:
    """Two GPUs, ``n`` points: GPU 0 reads 100 % utilized with 12 % SM activity, GPU 1 idles."""
    ts = [T0 + i * step for i in range(n)]

    def series(name, gpu, values):
        return {"metric": {"__name__": name, "gpu": str(gpu), "UUID": f"GPU-{gpu}", "hostname": "node-a",
                           "modelName": "NVIDIA H100 80GB HBM3", "instance": "node-a:9400", "job": "dcgm"},
                "values": [[t, v] for t, v in zip(ts, values)]}

    result = []
    for gpu in (0, 1):
        busy = gpu == 0
        result.append(series("DCGM_FI_DEV_GPU_UTIL", gpu, ["100" if busy else "0"] * n))
        result.append(series("DCGM_FI_PROF_SM_ACTIVE", gpu, ["0.12" if busy else "0"] * n))
        result.append(series("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", gpu, ["0.01" if busy else "0"] * n))
        result.append(series("DCGM_FI_DEV_FB_USED", gpu, ["60000" if busy else "0"] * n))
        result.append(series("DCGM_FI_DEV_FB_FREE", gpu, ["21559" if busy else "81559"] * n))
        result.append(series("DCGM_FI_DEV_POWER_USAGE", gpu, ["180.5" if busy else "70.1"] * n))
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


@pytest.mark.process
def test_query_range_json_report_calls_out_idle_and_busy_but_idle(tmp_path):
    p = tmp_path / "range.json"
    p.write_text(json.dumps(query_range(240, 15.0)))  # one hour at dcgm-exporter's 15 s scrape
    assert sniff(p) == "prometheus-json"
    run = read_query_range(p)
    assert len(run.gpu) == 480
    res = gpusleuth("report", p, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    titles = {f["title"]: f for f in doc["findings"]}
    idle = [f for t, f in titles.items() if t.startswith("GPU 1 sat idle")]
    assert idle and idle[0]["severity"] == "high"
    busy = [f for t, f in titles.items() if t.startswith("GPU 0 reads 100% utilized")]
    assert busy, titles  # real SM activity (12 %) says the "100 %" does little work
    assert not [t for t in titles if t.startswith("GPU 0 sat idle")]


def test_bad_query_json_is_a_sentence(tmp_path):
    p = tmp_path / "err.json"
    p.write_text(json.dumps({"status": "error", "errorType": "bad_data", "error": "exceeded maximum resolution",
                             "data": {"resultType": "matrix", "result": []}}))
    with pytest.raises(InputError, match="exceeded maximum resolution"):
        read_query_range(p)
