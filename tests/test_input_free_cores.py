"""The input-pipeline prediction counts the cores the training loop itself holds.

On a CPU job torch's intra-op threads compute on every core they are given, so a DataLoader worker added
beside them takes its CPU from the compute. Measured on the field corpus's MNIST CNN (pytorch/examples
``mnist/main.py``, 2 cores): with torch's 2 threads one worker removed the 30 ms data wait and the step got
no faster (×0.88–1.00) where "1 core free" predicted ×1.33; with one intra-op thread the same worker gave
×1.29–1.33 (predicted ×1.33). Both recordings are of the real script in a child process; what is asserted
holds on a loaded host too (the cores the loop holds are the job's own, whatever else runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workloads" / "field"))
import corpus  # noqa: E402

pytestmark = pytest.mark.slow


def _input_finding(tmp_path: Path, omp_threads: str | None) -> dict:
    script = corpus.BY_NAME["mnist_cnn"]
    env = corpus.environment(script)
    env.pop("OMP_NUM_THREADS", None)
    if omp_threads is not None:
        env["OMP_NUM_THREADS"] = omp_threads
    out = tmp_path / f"run-{omp_threads}"
    done = subprocess.run(corpus.command(script, out, False, tmp_path), env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = subprocess.run([sys.executable, "-m", "gpusleuth", "report", str(out), "--json"],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    findings = [f for f in json.loads(report.stdout)["findings"] if f["cause"] == "input.preprocessing"]
    assert findings, "the MNIST CNN loads on its training thread (num_workers=0 on CPU): an input finding"
    return findings[0]


def _free(finding: dict) -> tuple[float, str]:
    ev = next(e for e in finding["evidence"] if e["name"] == "cores free for loader workers")
    return float(ev["value"]), ev["source"]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores: torch's threads must be more than one")
def test_a_cpu_loop_on_every_core_leaves_none_for_workers(tmp_path):
    finding = _input_finding(tmp_path, None)  # torch's default: one intra-op thread per core
    free, how = _free(finding)
    assert free == 0.0, how
    assert "torch intra-op threads" in how and "the compute runs on the CPU" in how
    assert "no gain is predicted from them" in finding["summary"]
    assert "num_workers=" not in (finding.get("fix") or "")  # no worker count recommended for no free core


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores: one for the loop, one for a worker")
def test_a_single_threaded_loop_holds_one_core(tmp_path):
    finding = _input_finding(tmp_path, "1")
    _, how = _free(finding)
    assert "− 1 for the training loop" in how and "intra-op" not in how
