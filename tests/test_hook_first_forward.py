"""The hook's closure-aware optimizer time and its pre-forward gap (issue 12), on real CPU training in
child Pythons: the planted sleeps are the ground truth."""

from __future__ import annotations

import pytest

from test_hook import main_events, run_script, steps

pytestmark = pytest.mark.process  # starts child processes (tests/conftest.py: lanes)

CLOSURE = """
import time, torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(16, 8), torch.randn(16, 1)
def closure():
    time.sleep(0.03)                   # forward/backward's stand-in: 30 ms inside the closure
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss
for _ in range(6):
    opt.step(closure)                  # Lightning's shape: step(closure) runs forward and backward
for _ in range(3):
    opt.step(closure=closure)          # keyword form too
"""


def test_optimizer_time_excludes_the_closure(tmp_path):
    res, run_dir = run_script(tmp_path, CLOSURE)
    assert res.returncode == 0, res.stderr
    rows = steps(main_events(run_dir))
    assert len(rows) == 9
    for r in rows[1:]:
        dur = r["end_ns"] - r["start_ns"]
        assert dur >= 30e6
        assert r["optimizer_ns"] < 10e6, "the closure's 30 ms are not the optimizer's work"


GAP = """
import sys, time, torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Flatten(), torch.nn.Linear(8 * 6, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
fixed = torch.randint(0, 50, (4, 6))
fresh = sys.argv[1] == "fresh"
for _ in range(8):
    if fresh:
        time.sleep(0.02)               # a slow get_batch: 20 ms
        x = torch.randint(0, 50, (4, 6))
    else:
        time.sleep(0.02)               # 20 ms of other host work; the batch is the same tensor
        x = fixed
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.parametrize("mode", ["fresh", "reused"])
def test_pre_forward_gap_and_batch_shape(tmp_path, mode):
    res, run_dir = run_script(tmp_path, GAP, mode)
    assert res.returncode == 0, res.stderr
    rows = steps(main_events(run_dir))
    assert len(rows) == 8
    assert rows[0]["pre_forward_ns"] == -1  # the first step starts at its own first activity
    for r in rows[1:]:
        assert 20e6 <= r["pre_forward_ns"] < 20e6 + 15e6
        assert (r["forward_samples"], r["forward_tokens"]) == (4, 24)  # [4, 6] integer ids
        assert r["forward_input_new"] == (1 if mode == "fresh" else 0)
        assert r["data_cpu_ns"] < 0.5 * r["pre_forward_ns"], "sleeping is not CPU work"
