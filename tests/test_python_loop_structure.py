"""host.python tells a Python loop from a model's own repetition (``analysis/host_ops.loop_iterations``).

A loop issues one body of ops again and again, back to back; vectorizing it removes the iterations. A model's
layers and gradient accumulation's micro-batches repeat too, but no rewrite of the step's Python issues them
less often. The real cases: a 24-layer stack of small Linear+ReLU blocks, traced by torch.profiler on CPU,
was told "HIGH host.python, 80 % of the step removable" (every block's ops issued 24 times a step); its twin
with a per-row loss loop over 64 rows keeps its finding. Forward-only (inference, ``torch.no_grad``) there is
no backward to tell layers by; the ops' recorded arguments (``record_shapes``) do: Qwen1.5-0.5B's inference
step on an H100 read 1,352 looped calls (24 decoder layers), the same call with the same shapes every layer."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import FIXTURES, gpusleuth
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


def _calls(signatures: list[str]) -> dict:
    """``loop_iterations``' argument evidence: per call its signature's code (equal text, equal
    code) and each code's tensor sizes, read from the ``Input Dims`` before the `` | `` (scalar values after)."""
    table = sorted(set(signatures))
    codes = np.array([table.index(t) for t in signatures])
    sizes = {i: frozenset(v for dims in json.loads(t.split(" | ")[0]) for v in dims) for i, t in enumerate(table)}
    return {"calls": codes, "sizes": sizes}


def _forward_looped(seq: list[str], signatures: list[str]) -> np.ndarray:
    codes = np.array([NAMES[s] for s in seq])
    no = np.zeros(len(codes), bool)
    return loop_iterations(codes, no, no, **_calls(signatures))


def test_forward_layers_are_the_same_call_with_the_same_arguments():
    """24 iterations over [64, 32] activations each, nothing walking: layers. Without recorded arguments
    there is no evidence: a loop it stays."""
    seq = ["linear", "relu"] * 24
    sig = ["[[64, 32], [32, 32], [32]]", "[[64, 32]]"] * 24
    assert not _forward_looped(seq, sig).any()
    no = np.zeros(len(seq), bool)
    assert _looped(seq).all() and loop_iterations(np.array([NAMES[s] for s in seq]), no, no).all()


def test_forward_row_loops_leave_the_loop_variable_in_the_trace():
    """o[i] is a select whose index walks; ``for row in o`` unbinds o's 64 rows right before 64 iterations."""
    seq = ["linear", *["select", "logsumexp"] * 64]
    sig = ["[[64, 32], [10, 32], [10]]",
           *[s for i in range(64) for s in (f'[[64, 10], [], []] | ["", "0", "{i}"]', "[[10]]")]]
    assert _forward_looped(seq, sig)[1:].all()
    seq = ["linear", "select", *["logsumexp", "sub"] * 64]  # (the unbind, by any name: its sizes count)
    sig = ["[[64, 32], [10, 32], [10]]", "[[64, 10], []]", *["[[10]]", "[[10], [10]]"] * 64]
    assert _forward_looped(seq, sig)[2:].all()


def test_qwen_inference_layers_are_not_a_loop():
    """Qwen1.5-0.5B, 24 decoder layers, bf16 inference on an H100 (TraceLens' trace, record_shapes on): one
    body of 56 calls runs 24 times over [16, 559, 1024] activations; read as a loop it was 1,352 of the
    step's 1,378 top-level calls, 50 % of the step 'removable'."""
    stats = host_op_stats(load_trace(FIXTURES / "tracelens" / "h100_qwen1.5_0.5b.json.gz"))
    assert stats is not None and stats.ops_per_step > 1300
    assert stats.looped_ops_per_step == 0 and stats.removable_share == 0


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


def _profile(tmp_path, job_text: str, variant: str):
    """Run the job's ``variant`` under torch.profiler; its host-op statistics and host.python findings."""
    job, trace = tmp_path / "job.py", tmp_path / f"{variant}.pt.trace.json"
    job.write_text(textwrap.dedent(job_text))
    res = subprocess.run([sys.executable, str(job), variant, str(trace)], capture_output=True, text=True,
                         timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    stats = host_op_stats(load_trace(trace))
    rep = gpusleuth("report", str(trace), "--json")
    assert rep.returncode == 0, rep.stderr
    return stats, [f for f in json.loads(rep.stdout)["findings"] if f["cause"] == "host.python"]


@pytest.mark.process
@pytest.mark.parametrize("variant", ["layers", "rows"])
def test_real_deep_stack_against_its_row_loop_twin(tmp_path, variant):
    stats, python = _profile(tmp_path, JOB, variant)
    if variant == "layers":
        assert stats.ops_per_step > 100  # 25 linears, 24 ReLUs, their backward nodes: each issued 24+ times
        assert stats.looped_ops_per_step == 0 and python == []
    else:  # the loop's calls, forward and backward, 64 iterations each; the layers' still not counted
        assert stats.looped_ops_per_step >= 64 * 8
        assert stats.looped_ops_per_step < stats.ops_per_step - 100
        assert len(python) == 1


INFER_JOB = """
import sys, torch, torch.nn as nn
torch.manual_seed(0); torch.set_num_threads(1)
variant, out = sys.argv[1], sys.argv[2]
model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(24)], nn.Linear(32, 10))
x = torch.randn(64, 32)
sched = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                            record_shapes=True,
                                            on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
    for _ in range(6):
        o = model(x)
        if variant == "index":  # per-row post-processing, row by index
            preds = [o[i].softmax(0).log().argmax() for i in range(len(o))]
        elif variant == "iterate":  # the same, iterating the tensor
            preds = [row.softmax(0).log().argmax() for row in o]
        else:
            preds = o.softmax(1).log().argmax(1)
        prof.step()
"""


@pytest.mark.process
@pytest.mark.parametrize("variant", ["layers", "index", "iterate"])
def test_real_inference_stack_against_its_row_loop_twins(tmp_path, variant):
    """Forward only, under torch.no_grad: the 24 layers are no loop (read as 49 of the step's 51 calls
    looped, HIGH, before); a per-row loop over the output's 64 rows, by index or by iterating, is."""
    stats, python = _profile(tmp_path, INFER_JOB, variant)
    if variant == "layers":
        assert stats.ops_per_step > 48  # 25 linears, 24 ReLUs
        assert stats.looped_ops_per_step == 0 and python == []
    else:  # the loop's 64 iterations of 3-4 calls; the layers' 49 calls still not counted
        assert stats.looped_ops_per_step >= 64 * 3
        assert stats.looped_ops_per_step <= stats.ops_per_step - 48
        assert len(python) == 1


BLOCKS_JOB = """
import sys, torch, torch.nn as nn
torch.manual_seed(0); torch.set_num_threads(1)
variant, out = sys.argv[1], sys.argv[2]
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(32), nn.Linear(32, 64), nn.Linear(64, 32)
    def forward(self, x):
        return x + self.down(torch.relu(self.up(self.norm(x))))
model = nn.Sequential(*[Block() for _ in range(24)], nn.Linear(32, 10))
x = torch.randn(64, 32)
sched = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
with torch.no_grad(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                            record_shapes=variant == "shapes",
                                            on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
    for _ in range(6):
        preds = model(x).argmax(1)
        prof.step()
"""


@pytest.mark.process
@pytest.mark.parametrize("variant", ["shapes", "no_shapes"])
def test_real_inference_blocks_with_and_without_recorded_shapes(tmp_path, variant):
    """24 residual blocks (5 calls each) under torch.no_grad: 120 calls a step issued as one body 24 times,
    read as "HIGH host.python, 97 % removable". With the ops' shapes recorded they are layers, no finding;
    without (gpusleuth's own --profile-steps records none) nothing in the trace tells layers from a loop, so
    the finding stays, at most moderate, low confidence, saying why."""
    stats, python = _profile(tmp_path, BLOCKS_JOB, variant)
    assert stats.ops_per_step >= 120
    if variant == "shapes":
        assert stats.looped_ops_per_step == 0 and python == []
    else:
        assert stats.looped_ops_per_step >= 100 and stats.forward_only_unproven
        assert len(python) == 1
        f = python[0]
        assert f["severity"] == "moderate" and f["confidence"] == "low"
        assert "record_shapes" in f["summary"] and "not the model's layers" not in f["summary"]
