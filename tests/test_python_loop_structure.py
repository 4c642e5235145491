"""host.python tells a Python loop from a model's own repetition (``analysis/host_ops.loop_iterations``).

A loop issues one body of ops again and again, back to back; vectorizing it removes the iterations. A model's
layers and gradient accumulation's micro-batches repeat too, but no rewrite of the step's Python issues them
less often. The real cases: a 24-layer stack of small Linear+ReLU blocks, traced by torch.profiler on CPU,
was told "HIGH host.python, 80 % of the step removable" (every block's ops issued 24 times a step); its twin
with a per-row loss loop over 64 rows keeps its finding."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import gpusleuth
from gpusleuth.analysis.host_ops import host_op_stats, loop_iterations
from gpusleuth.sources.kineto import load_trace

# one step's op names as codes: F forward ops, B backward nodes, A AccumulateGrad nodes
NAMES = {"linear": 0, "relu": 1, "select": 2, "logsumexp": 3, "sub": 4, "add": 5, "loss": 6,
         "AddmmBackward0": 10, "ReluBackward0": 11, "SelectBackward0": 12, "AccumulateGrad": 13, "TBackward0": 14}
BACKWARD = {10, 11, 12, 13, 14}


def _looped(seq: list[str]) -> np.ndarray:
    codes = np.array([NAMES[s] for s in seq])
    return loop_iterations(codes, np.isin(codes, list(BACKWARD)), codes == NAMES["AccumulateGrad"])


def test_a_body_repeated_back_to_back_is_a_loop():
    rows = ["select", "logsumexp", "select", "sub", "add"] * 20
    looped = _looped(["linear", "relu", "linear", "loss", *rows, "SelectBackward0", "AddmmBackward0"])
    assert looped[4:4 + len(rows)].all() and not looped[:4].any() and not looped[-2:].any()


def test_fifteen_iterations_are_not_a_loop():
    assert not _looped(["select", "logsumexp", "sub", "add"] * 15).any()


def test_the_same_ops_spread_over_layers_and_micro_batches_are_not_a_loop():
    """A block issuing linear four times, 2 blocks × 2 micro-batches (nanoGPT's shape): linear 16+ times a
    step, never one body 16 times over."""
    block = ["linear", "relu", "linear", "add", "linear", "relu", "linear", "add"]
    backward = ["AddmmBackward0", "AccumulateGrad", "ReluBackward0", "AddmmBackward0", "AccumulateGrad"] * 4
    step = (block * 2 + ["loss"] + backward) * 2
    assert not _looped(step).any()


def test_micro_batches_are_not_a_loop_however_many():
    """Each iteration is a forward and a backward: gradient accumulation (nanoGPT's GPT-2 config runs 40)."""
    micro = ["linear", "relu", "linear", "loss", "AddmmBackward0", "ReluBackward0", "AddmmBackward0"]
    assert not _looped(micro * 40).any()


def test_a_deep_stack_is_not_a_loop_but_a_row_loop_beside_it_is():
    """24 parameter layers: their backward accumulates into each layer's own weights, so the 24 forward
    iterations are layers too; a 64-row loop's iterations send gradients to one tensor (no AccumulateGrad)."""
    fwd = ["linear", "relu"] * 24
    rows = ["select", "logsumexp", "sub", "add"] * 64
    bwd_rows = ["SelectBackward0", "ReluBackward0"] * 64
    bwd_layers = ["ReluBackward0", "AddmmBackward0", "AccumulateGrad", "TBackward0", "AccumulateGrad"] * 24
    seq = fwd + ["loss"] + rows + bwd_rows + bwd_layers
    looped = _looped(seq)
    assert not looped[:len(fwd)].any() and not looped[-len(bwd_layers):].any()
    start = len(fwd) + 1
    assert looped[start:start + len(rows) + len(bwd_rows)].all()


JOB = """
import sys, torch, torch.nn as nn
torch.manual_seed(0); torch.set_num_threads(1)
rows, out = sys.argv[1] == "rows", sys.argv[2]
model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(24)], nn.Linear(32, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))
sched = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                            on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
    for _ in range(6):
        o = model(x)
        if rows:  # the per-row loss loop a vectorized cross_entropy replaces
            loss = sum(o[i].logsumexp(0) - o[i][y[i]] for i in range(len(o))) / len(o)
        else:
            loss = nn.functional.cross_entropy(o, y)
        opt.zero_grad(); loss.backward(); opt.step(); prof.step()
"""


@pytest.mark.process
@pytest.mark.parametrize("variant", ["layers", "rows"])
def test_real_deep_stack_against_its_row_loop_twin(tmp_path, variant):
    job, trace = tmp_path / "job.py", tmp_path / f"{variant}.pt.trace.json"
    job.write_text(textwrap.dedent(JOB))
    res = subprocess.run([sys.executable, str(job), variant, str(trace)], capture_output=True, text=True,
                         timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    stats = host_op_stats(load_trace(trace))
    rep = gpusleuth("report", str(trace), "--json")
    assert rep.returncode == 0, rep.stderr
    python = [f for f in json.loads(rep.stdout)["findings"] if f["cause"] == "host.python"]
    if variant == "layers":
        assert stats.ops_per_step > 100  # 25 linears, 24 ReLUs, their backward nodes: each issued 24+ times
        assert stats.looped_ops_per_step == 0 and python == []
    else:  # the loop's calls, forward and backward, 64 iterations each; the layers' still not counted
        assert stats.looped_ops_per_step >= 64 * 8
        assert stats.looped_ops_per_step < stats.ops_per_step - 100
        assert len(python) == 1
