"""``gpusleuth compare`` reads what ``report`` reads (issue 22, one door in): each side goes through
``sources/inputs.read_inputs`` — a run directory, a profiler trace, an Nsight Systems export, a GPU log —
on real fixtures, in-process (the unit lane). Before, compare called ``load_run`` itself and refused
anything but a run directory ("expected a gpusleuth run directory")."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpusleuth.cli.main import main

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent / "fixtures"
RUN = FIX / "rundir" / "finished"  # recorded by gpusleuth run (fixtures/rundir/README.md)
TRACE = FIX / "field_traces" / "python_loop_planted.pt.trace.json.gz"  # torch.profiler, CPU
NSYS = FIX / "nsys" / "aws_t4_uvm_report2.sqlite"
SMI = FIX / "nvidia-smi" / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"


def _json(capsys, *argv) -> dict:
    assert main([*map(str, argv), "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_compare_reads_a_run_directory_a_trace_an_nsys_export_and_a_gpu_log(capsys):
    doc = _json(capsys, "compare", RUN, TRACE, NSYS, SMI)
    runs = doc["runs"]
    assert [r["path"] for r in runs] == [str(p) for p in (RUN, TRACE, NSYS, SMI)]
    # each side's numbers are the ones its own report reads
    for path, col in zip((TRACE, NSYS), runs[1:3]):
        rep = _json(capsys, "report", path)
        traced = [s["duration_s"] for r in rep["ranks"] for s in r["steps"]]
        assert col["metrics"]["step_time"] == pytest.approx(float(np.median(traced)))
    run = _json(capsys, "report", RUN)
    assert runs[0]["metrics"]["throughput"] == pytest.approx(run["outcomes"]["throughput"]["samples_per_s"])
    # a GPU log has no steps: no step numbers, its findings side by side with the others'
    smi = _json(capsys, "report", SMI)
    assert all(v is None for v in runs[3]["metrics"].values())
    assert [f["title"] for f in runs[3]["findings"]] == [f["title"] for f in smi["findings"]]
    assert all(v is None for v in doc["deltas"][3].values())  # nothing to set against the baseline


def test_compare_of_two_traces_has_a_step_time_delta(capsys):
    doc = _json(capsys, "compare", TRACE, NSYS)
    base, other = (r["metrics"]["step_time"] for r in doc["runs"])
    assert doc["deltas"][1]["step_time"] == pytest.approx(other / base - 1)


def test_an_input_compare_cannot_read_is_one_sentence(capsys, tmp_path):
    missing = tmp_path / "nope.json"
    assert main(["compare", str(RUN), str(missing)]) == 2
    assert capsys.readouterr().err == f"gpusleuth: error: {missing}: no such file or directory\n"
    bad = FIX / "traces" / "not_a_trace.json"
    assert main(["compare", str(RUN), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpusleuth: error: {bad}: ") and err.count("\n") == 1, err
