"""A header-less multi-GPU log in the layout SLURM helpers write (``--query-gpu=timestamp,name,pci.bus_id,
driver_version,pstate,pcie.link.gen.max,pcie.link.gen.current,temperature.gpu,utilization.gpu,
utilization.memory,memory.total,memory.free,memory.used --format=csv,noheader``; the three A100 rows below
are the shape OmniOpt documents for its gpu_usage files): the GPUs are told apart by their PCI bus id and
named, an idle card is called out and priced from the dated table, and a sampler gap is a stated loss."""

from __future__ import annotations

import datetime
import json

from conftest import gpusleuth

import pytest

pytestmark = pytest.mark.process  # starts child processes (tests/conftest.py: lanes)

BUSES = ["00000000:3B:00.0", "00000000:8B:00.0", "00000000:0B:00.0"]


def _log(path, seconds=600, gap=(200, 260)):
    base = datetime.datetime(2024, 6, 1, 11, 27, 5, 177000)
    rows = []
    for i in range(seconds):
        if gap[0] <= i < gap[1]:
            continue
        # the rows of one tick come in the order nvidia-smi enumerates, which is not the bus order here
        for j, bus in enumerate(BUSES if i % 2 else list(reversed(BUSES))):
            ts = (base + datetime.timedelta(seconds=i, milliseconds=4 * j)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
            busy = bus != "00000000:0B:00.0"
            util = (90 if i % 10 else 30) if busy else 0
            used = 30000 if busy else 4
            rows.append(f"{ts}, NVIDIA A100-SXM4-40GB, {bus}, 545.23.08, P0, 4, 4, 44, {util} %, {util // 2} %, "
                        f"40960 MiB, {40960 - used} MiB, {used} MiB")
    path.write_text("\n".join(rows) + "\n")


def test_noheader_gpus_by_bus_id_idle_card_priced_and_gap_stated(tmp_path):
    log = tmp_path / "gpu_usage_0.csv"
    _log(log)
    res = gpusleuth("report", log, "--json", "--tz", "UTC")
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    assert [g["name"] for g in d["gpu"]] == ["NVIDIA A100-SXM4-40GB"] * 3
    utils = sorted(round(g["util_gpu"]["mean"]) for g in d["gpu"])
    assert utils == [0, 84, 84]  # the bus id keeps each card's samples together whatever the row order
    idle = [f for f in d["findings"] if "sat idle" in f["title"]]
    assert len(idle) == 1 and idle[0]["severity"] == "high"
    assert idle[0]["estimated_gain"]["dollars_per_run"] is not None  # A100 at the dated table price
    assert any("pci.bus_id" in x for x in d["losses"])  # the inferred fields are said
    assert sum("sampler gap" in x for x in d["losses"]) == 3
    assert d["outcomes"] is None  # a GPU log has no training steps to account for
