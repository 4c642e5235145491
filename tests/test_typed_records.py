"""The records a Run carries from its sources are held to their declared types (run/records.py, issue 35 item 1):
a hardware description in meta.json, a DataLoader record from the hook. The analysis reads them through those
types, so a hand-edited or damaged value is dropped and said where it is read, not met as a string in arithmetic
later."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import numpy as np

from gpusleuth.analysis.loop import framework
from gpusleuth.run.meta import check_meta, read_meta
from gpusleuth.run.model import Run, Table
from gpusleuth.run.records import GpuHardware, checked, loader_config
from gpusleuth.sources.gpu_samples import build_gpu_run

ROOT = Path(__file__).resolve().parents[1]


def test_meta_hardware_fields_of_the_wrong_type_are_dropped(tmp_path):
    meta = {"format": 1, "recorder": {
        "gpu": [{"index": "0", "name": "NVIDIA H100", "power_limit_w": "700 W", "max_sm_clock_mhz": 1980,
                 "mig": 1, "vendor_field": "kept"}],
        "host": {"logical_cores": 2.5, "cgroup_cpu_limit_cores": 1, "cpu_model": 7, "os": "Linux"}}}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    notes: list[str] = []
    m = read_meta(tmp_path, notes)
    gpu = m["recorder"]["gpu"][0]
    # index may not be None (it names the samples' device): left out; the others become None
    assert "index" not in gpu
    assert gpu["power_limit_w"] is None and gpu["mig"] is None
    assert gpu["name"] == "NVIDIA H100" and gpu["max_sm_clock_mhz"] == 1980  # an int where a float is declared
    assert gpu["vendor_field"] == "kept"  # a source's own scalar field stays (the JSON report shows it)
    host = m["recorder"]["host"]
    assert host["logical_cores"] is None and host["cpu_model"] is None
    assert host["cgroup_cpu_limit_cores"] == 1 and host["os"] == "Linux"
    dropped = {n.split("field ", 1)[1].split(" ", 1)[0] for n in notes}
    assert dropped == {"index", "power_limit_w", "mig", "logical_cores", "cpu_model"}, notes


def test_a_well_typed_description_is_left_as_it_was():
    gpu = {"index": 1, "name": "A100", "memory_total": 85899345920, "power_limit_w": 400.0, "gpm_supported": False,
           "mig_mode": None, "parent": 0}
    meta = {"recorder": {"gpu": [dict(gpu)], "host": {"logical_cores": 8, "mem_total": 2**36}}}
    assert check_meta(meta) == []
    assert meta["recorder"]["gpu"] == [gpu]


def test_loader_record_types_are_checked():
    rec = {"kind": "dataloader", "pid": 12, "t_ns": 5, "num_workers": "4", "pin_memory": 1, "batch_size": 32,
           "persistent_workers": True, "prefetch_factor": None, "dataset": "FakeData"}
    cfg = loader_config(rec)
    assert cfg["num_workers"] is None and cfg["pin_memory"] is None  # a string count, an int for a bool
    assert cfg["batch_size"] == 32 and cfg["persistent_workers"] is True and cfg["dataset"] == "FakeData"
    assert cfg["pid"] == 12
    assert loader_config({"pid": "12"}) == {}  # a pid that is not one cannot match the main process: gone
    assert rec["num_workers"] == "4"  # the Run's own record is not changed


def test_a_bool_is_not_a_count():
    assert checked({"index": True, "sm_count": False}, GpuHardware) == {"sm_count": None}


def test_the_framework_is_one_fact_of_the_loop():
    run = Run(meta={}, infos=[{"kind": "dataloader", "num_workers": 2}, {"kind": "framework", "name": ""},
                              {"kind": "framework", "name": "lightning"}, {"kind": "framework", "name": "x"}])
    assert framework(run) == "lightning"
    assert framework(Run(meta={}, infos=[{"kind": "torch_runtime"}])) is None


def test_an_imported_gpu_log_types_its_device_fields(tmp_path):
    cols = {"t_ns": np.array([1, 2], np.int64), "gpu": np.array([0, 0], np.int32)}
    run = build_gpu_run(tmp_path / "log.csv", cols, source="nvidia-smi", losses=[],
                        devices={0: {"name": "NVIDIA H100", "power_limit_w": "N/A", "host": "node-1"}})
    assert run.meta["recorder"]["gpu"] == [{"index": 0, "name": "NVIDIA H100", "power_limit_w": None,
                                            "host": "node-1"}]
    assert isinstance(run.gpu, Table)


def test_py_typed_is_declared_and_shipped():
    """Type checkers read gpusleuth's annotations only when the package carries py.typed (PEP 561): the marker
    exists and the package data puts it in the wheel."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["gpusleuth"]
    assert (ROOT / "src" / "gpusleuth" / "py.typed").is_file()


def test_severity_and_confidence_are_closed_sets():
    """A finding's severity and confidence are Literals (mypy checks every rule's words) and the constructor
    refuses any other value, so a typo cannot reach the JSON that CI matches on."""
    from typing import get_args, get_type_hints

    import pytest

    from gpusleuth.diagnosis.finding import CONFIDENCES, Finding
    from gpusleuth.diagnosis.taxonomy import SEVERITIES

    hints = get_type_hints(Finding)
    assert get_args(hints["severity"]) == SEVERITIES
    assert get_args(hints["confidence"]) == CONFIDENCES == ("low", "medium", "high")
    with pytest.raises(ValueError, match="unknown confidence 'certain'"):
        Finding(cause="sizing", severity="moderate", title="t", summary="s", evidence=[], fix="f",
                confidence="certain")  # type: ignore[arg-type]
