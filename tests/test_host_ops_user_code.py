"""host.python counts only the training code's own ops (issue 12): a default DataLoader indexes each sample
and collates in the training thread — hundreds of tiny ops per step that are the loader's, not the user's.
A real job, a real --profile-steps trace."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from gpusleuth.analysis.host_ops import host_op_stats
from gpusleuth.pipeline.build import build_report
from gpusleuth.sources.rundir import load_run

JOB = """
import torch
from torch.utils.data import DataLoader, TensorDataset
torch.manual_seed(0); torch.set_num_threads(1)
ds = TensorDataset(torch.randn(3072, 64), torch.randint(0, 8, (3072,)))
model = torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 8))
opt = torch.optim.Adam(model.parameters())
for x, y in DataLoader(ds, batch_size=256):   # 256 per-sample __getitem__ + collate per step
    torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step(); opt.zero_grad()
"""


@pytest.mark.slow
def test_dataloader_indexing_is_not_the_users_python_overhead(tmp_path):
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB))
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "run", "--no-gpu", "--no-report", "--profile-steps",
                          "3-6", "--out", str(out), "--", sys.executable, str(tmp_path / "job.py")],
                         capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    run = load_run(out)
    (stats,) = [host_op_stats(p) for p in run.profiles]
    assert stats.excluded_s_per_step > 0  # the fetch windows were found and taken out
    assert stats.ops_per_step < 100, stats  # the user's ops: forward, loss, backward, Adam (not 256 × index)
    assert not [f for f in build_report(run).findings if f.cause == "host.python"]
