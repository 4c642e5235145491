"""`gpusleuth run --json > out.json`: stdout carries the JSON report alone; the job's own output goes to
stderr (and to output.log with --capture-output). Real child processes, real job output."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

JOB = "import sys; print('job says hello'); print('job warns', file=sys.stderr)"


@pytest.mark.parametrize("capture", [False, True])
def test_json_stdout_is_only_json(tmp_path, capture):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "gpusleuth", "run", "--no-gpu", "--json", "--out", str(out)]
    cmd += ["--capture-output"] if capture else []
    res = subprocess.run(cmd + ["--", sys.executable, "-c", JOB], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)  # the whole of stdout is one JSON document
    assert report["run"]
    assert "job says hello" in res.stderr and "job warns" in res.stderr
    if capture:
        log = (out / "output.log").read_text()
        assert "job says hello" in log and "job warns" in log
