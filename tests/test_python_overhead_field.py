"""host.python on the traces of real training scripts (issue 27, defects 1 and 11).

A stock ResNet-18 (pytorch/examples imagenet ``--dummy -a resnet18``) was told "HIGH host.python — 497 tiny
ops per step · 20.00×" because every op issued 16+ times a step counted as overhead, whatever it cost (its
20 convolutions at tens of ms each); Lightning's autoencoder example was told ×7.51 (×2.96 on the trace
kept here) for its own per-step hooks. A finding may only price what vectorizing a loop removes. The
positive control is a real per-row Python loop, which must keep its finding with a gain near what its fixed
twin measured outside the profiler (×2.3 here; README beside the traces).

nanoGPT with gradient accumulation ×2 was told "HIGH host.python, 411 op calls per step from loops" (26 % of
the step on the trace kept here): each block's ops ran ≥ 16 times a step, in 2 blocks × 2 micro-batches. A
loop is one body of ops issued again and again back to back; a model's layers and micro-batches are not."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import FIXTURES, gpusleuth
from gpusleuth.analysis.host_ops import REPEAT, host_op_stats
from gpusleuth.sources.kineto import load_trace
from gpusleuth.sources.kineto.model import CPU_OP, USER_ANN

FIELD = FIXTURES / "field_traces"


def _report(name: str) -> dict:
    res = gpusleuth("report", str(FIELD / name), "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _python(d: dict) -> list[dict]:
    return [f for f in d["findings"] if f["cause"] == "host.python"]


@pytest.mark.parametrize("name", ["imagenet_resnet18.pt.trace.json.gz", "lightning_autoencoder.pt.trace.json.gz",
                                  "nanogpt_accum2.pt.trace.json.gz"])
@pytest.mark.process
def test_real_scripts_steps_are_not_python_loop_overhead(name):
    assert _python(_report(name)) == []


def _calls_per_step(name: str) -> dict[str, float]:
    """Top-level op calls per profiled step of the training thread, by op name (the old rule's count)."""
    tr = load_trace(FIELD / name).trace
    ev = tr.events
    steps = [r for r in np.flatnonzero(ev["kind"] == USER_ANN) if tr.names[ev["name"][r]].startswith("ProfilerStep#")]
    counts: dict[str, float] = {}
    for r in steps:
        lo, hi, tid = ev["ts"][r], ev["ts"][r] + ev["dur"][r], ev["tid"][r]
        rows = np.flatnonzero((ev["kind"] == CPU_OP) & (ev["tid"] == tid) & (ev["ts"] >= lo) & (ev["ts"] < hi))
        rows = rows[np.argsort(ev["ts"][rows], kind="stable")]
        end = -np.inf
        for i in rows:  # top-level: starts after every earlier op of the thread ended
            if ev["ts"][i] >= end:
                n = tr.names[ev["name"][i]]
                counts[n] = counts.get(n, 0) + 1
            end = max(end, ev["ts"][i] + ev["dur"][i])
    return {n: c / len(steps) for n, c in counts.items()}


def test_resnet18_repeated_layers_are_not_a_loop():
    """Hundreds of calls a step are of ops issued ≥ 16 times (its 20 convolutions and batch norms, their
    backward nodes; the SGD step's per-parameter loop is the optimizer's own: ``FRAMEWORK_SCOPES``), but no
    sequence of them runs 16 times back to back: layers, not a loop over rows. Nothing is removable."""
    name = "imagenet_resnet18.pt.trace.json.gz"
    assert sum(c for c in _calls_per_step(name).values() if c >= REPEAT) >= 200
    st = host_op_stats(load_trace(FIELD / name))
    assert st.op_share > 0.95
    assert st.looped_ops_per_step == 0 and st.removable_share == 0


def test_nanogpt_blocks_times_micro_batches_are_not_a_loop():
    """nanoGPT, 2 blocks, gradient accumulation ×2: ``aten::linear`` 18 calls a step (4 a block + the head,
    per micro-batch), ``aten::transpose`` 16, MmBackward0 18 — over 400 calls of ops issued ≥ 16 times, which
    the old count read as a loop (26 % of the step 'removable', HIGH). The same block never runs 16 times in
    a row, and each micro-batch is a forward and a backward: no call is a loop's."""
    name = "nanogpt_accum2.pt.trace.json.gz"
    calls = _calls_per_step(name)
    assert calls["aten::linear"] == 18 and calls["aten::transpose"] == 16
    assert sum(c for c in calls.values() if c >= REPEAT) >= 400
    st = host_op_stats(load_trace(FIELD / name))
    assert st.looped_ops_per_step == 0 and st.removable_share == 0
    assert st.tiny_ops_per_step > 500  # the small model's many small ops are still seen, as evidence


@pytest.mark.process
def test_a_real_python_loop_keeps_its_finding_with_a_bounded_gain():
    (f,) = _python(_report("python_loop_planted.pt.trace.json.gz"))
    # measured outside the profiler on the same loaded host: the vectorized twin ran ×1.65–2.3 faster;
    # today's rule said ×7.7 from this trace (every short op and all Python between ops, preemption included)
    assert 1.2 < f["estimated_gain"]["speedup"] < 3.0
