"""host.python on the traces of real training scripts (issue 27, defects 1 and 11).

A stock ResNet-18 (pytorch/examples imagenet ``--dummy -a resnet18``) was told "HIGH host.python — 497 tiny
ops per step · 20.00×" because every op issued 16+ times a step counted as overhead, whatever it cost (its
20 convolutions at tens of ms each); Lightning's autoencoder example was told ×7.51 (×2.96 on the trace
kept here) for its own per-step hooks. A finding may only price what vectorizing a loop removes. The
positive control is a real per-row Python loop, which must keep its finding with a gain near what its fixed
twin measured outside the profiler (×2.3 here; README beside the traces)."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, gpusleuth
from gpusleuth.analysis.host_ops import host_op_stats
from gpusleuth.sources.kineto import load_trace

FIELD = FIXTURES / "field_traces"


def _report(name: str) -> dict:
    res = gpusleuth("report", str(FIELD / name), "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _python(d: dict) -> list[dict]:
    return [f for f in d["findings"] if f["cause"] == "host.python"]


@pytest.mark.parametrize("name", ["imagenet_resnet18.pt.trace.json.gz", "lightning_autoencoder.pt.trace.json.gz"])
@pytest.mark.process
def test_real_scripts_steps_are_not_python_loop_overhead(name):
    assert _python(_report(name)) == []


def test_resnet18_repeated_convolutions_keep_their_work():
    """206 calls a step are of ops the training code issues ≥ 16 times (the SGD step's per-parameter loop, 250
    more, is the optimizer's own: ``FRAMEWORK_SCOPES``), but they are layers, not a loop over rows: only
    their dispatch is removable, a few per cent of a step whose time is inside the convolutions."""
    st = host_op_stats(load_trace(FIELD / "imagenet_resnet18.pt.trace.json.gz"))
    assert st.looped_ops_per_step >= 200 and st.op_share > 0.95
    assert st.removable_share < 0.05


@pytest.mark.process
def test_a_real_python_loop_keeps_its_finding_with_a_bounded_gain():
    (f,) = _python(_report("python_loop_planted.pt.trace.json.gz"))
    # measured outside the profiler on the same loaded host: the vectorized twin ran ×1.65–2.3 faster;
    # today's rule said ×7.7 from this trace (every short op and all Python between ops, preemption included)
    assert 1.2 < f["estimated_gain"]["speedup"] < 3.0
