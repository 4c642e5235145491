"""A multi-rank recording is one job: a real ``torchrun`` (gloo, CPU) under ``gpusleuth run`` reports its
world size, every rank's steps, and the job's throughput (the sum over ranks), not rank 0 alone."""

from __future__ import annotations

import json
import textwrap

import pytest

from conftest import free_port, gpusleuth, run_multirank

pytest.importorskip("torch")

DDP = textwrap.dedent('''
    import os, time, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DDP(torch.nn.Linear(64, 64))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(512, 64), torch.randn(512, 64))
    sampler = torch.utils.data.distributed.DistributedSampler(data)
    loader = torch.utils.data.DataLoader(data, batch_size=16, sampler=sampler)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            time.sleep(0.005)
    dist.destroy_process_group()
''')



@pytest.mark.slow
def test_torchrun_job_is_reported_as_one_job_of_two_ranks(tmp_path):
    script = tmp_path / "ddp.py"
    script.write_text(DDP)
    outs = [tmp_path / f"run{k}" for k in range(3)]
    res = run_multirank(lambda k: gpusleuth(
        "run", "--no-gpu", "--out", outs[k], "--no-report", "--", "python", "-m", "torch.distributed.run",
        "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(script),
        timeout=240, env={"OMP_NUM_THREADS": "1"}))
    assert res.returncode == 0, res.stderr
    out = next(o for o in reversed(outs) if o.exists())
    rep = gpusleuth("report", out, "--json")
    assert rep.returncode == 0, rep.stderr
    o = json.loads(rep.stdout)["outcomes"]
    assert o["world_size"] == 2
    ranks = o["ranks"]
    assert sorted(r["rank"] for r in ranks) == [0, 1]
    # 512 samples / 2 ranks / 16 per batch = 16 steps per epoch per rank, 2 epochs
    assert all(r["steps"] == 32 for r in ranks), ranks
    assert o["steps"] == 32 and o["main_pid"] == next(r["pid"] for r in ranks if r["rank"] == 0)
    assert o["job_samples_per_s"] == pytest.approx(sum(r["samples_per_s"] for r in ranks))
    assert o["job_samples_per_s"] > 1.5 * ranks[0]["samples_per_s"]
    console = gpusleuth("report", out)
    assert "2 ranks (world size 2)" in console.stdout
