"""`gpusleuth import FILE --out RUN_DIR` (real child processes): the run directory reads back like a recording."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pyarrow.parquet as pq

from conftest import gpusleuth
from gpusleuth.recorder.schemas import GPU_SCHEMA

import pytest

pytestmark = pytest.mark.process  # starts child processes (tests/conftest.py: lanes)

FIX = Path(__file__).parent / "fixtures"
PLATO = FIX / "nvidia-smi" / "plato_gpu_log_noheader.csv"
T4 = FIX / "nsys" / "aws_t4_uvm_report2.sqlite"


def test_gpu_log_becomes_a_run_directory_that_report_and_compare_read(tmp_path):
    out = tmp_path / "plato"
    res = gpusleuth("import", PLATO, "--out", out, "--tz", "UTC")
    assert res.returncode == 0, res.stderr
    assert "noheader" in res.stderr  # the losses are told at import time too
    table = pq.read_table(out / "gpu.parquet")
    assert table.schema.equals(GPU_SCHEMA) and table.num_rows == 1923
    doc = json.loads(gpusleuth("report", out, "--json").stdout)
    assert doc["gpu"][0]["samples"] == 1923
    assert any("sat idle" in f["title"] for f in doc["findings"])
    assert any("noheader" in x for x in doc["losses"])  # kept in meta.json, stated in every later report
    res = gpusleuth("compare", out, out, "--json")
    assert res.returncode == 0, res.stderr
    again = gpusleuth("import", PLATO, "--out", out)
    assert again.returncode == 2 and "already holds a run" in again.stderr


def test_nsys_export_becomes_trace_files_with_the_same_findings(tmp_path):
    out = tmp_path / "t4"
    res = gpusleuth("import", T4, "--out", out)
    assert res.returncode == 0, res.stderr
    assert (out / "trace" / "rank-0.json.gz").exists()
    direct = json.loads(gpusleuth("report", T4, "--json").stdout)
    stored = json.loads(gpusleuth("report", out, "--json").stdout)
    assert [f["title"] for f in stored["findings"]] == [f["title"] for f in direct["findings"]]
    kernels = sqlite3.connect(T4).execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert sum(r["kernels"]["kernels"] for r in stored["ranks"]) == kernels
