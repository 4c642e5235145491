"""The scenario suite: real PyTorch jobs with one planted bottleneck each, recorded under `gpusleuth run`
with their fixed twins. The planted run's top finding must name the planted cause; the fixed twin must
have no high-severity finding; the prediction error is computed for every scenario (BENCHMARKS.md has
the table) and its median is held to a loose bound here (the target, 15 pp, is a benchmark number on a
quiet machine; CI machines are shared and noisy).

Runs every CPU scenario once per session (~5 minutes on 2 cores); GPU-only scenarios skip without CUDA.
No scenario is excused on a small machine: the twins are built to be honest on 2 cores (docs/diagnosis.md).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCEN = Path(__file__).resolve().parents[1] / "scenarios"
sys.path.insert(0, str(SCEN))
import run_all  # noqa: E402
from conftest import HostLoad  # noqa: E402

pytestmark = pytest.mark.process  # starts child processes (tests/conftest.py: lanes)

CUDA = run_all.has_cuda()
SPECS = [s for s in run_all.SPECS]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return {}


def _result(results, spec, tmp_path_factory):
    if spec.name not in results:
        base = tmp_path_factory.mktemp(spec.name)
        results[spec.name] = run_all.run_spec(spec, base)
    return results[spec.name]


def _param(spec):
    return pytest.param(spec, id=spec.name)


@pytest.mark.parametrize("spec", [_param(s) for s in SPECS])
def test_planted_cause_is_top_and_fixed_twin_is_quiet(spec, results, tmp_path_factory):
    if spec.gpu and not CUDA:
        pytest.skip("needs a CUDA GPU")
    load = HostLoad()
    r = _result(results, spec, tmp_path_factory)
    if r["top"] == "contention" and spec.cause != "contention":
        # other processes took cores while the scenario ran and the product said so (the full suite, 2 cores:
        # the healthy job read contention once, and passed alone): right when this test measured them too
        load.skip_if_crowded(f"{spec.name} read contention")
    assert r["top"] == spec.cause, r
    assert r["fixed_high"] == [], r  # the fix removes the cause and brings no new problem
    if spec.cause == "healthy":
        assert r["top_severity"] == "none"
    else:
        assert r["predicted_speedup"] > 1.05, r  # a real prediction, not a placeholder


def test_median_prediction_error_is_bounded(results, tmp_path_factory):
    rows = [_result(results, s, tmp_path_factory) for s in SPECS if CUDA or not s.gpu]
    errors = [r["error_pp"] for r in rows]
    print("\n" + run_all.table(rows))
    assert statistics.median(errors) <= 25.0, run_all.table(rows)
