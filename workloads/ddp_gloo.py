"""A ``torchrun`` DDP job on CPU (gloo): 2 ranks, rank 1 ``--straggle-ms`` slower per step, so rank 0
waits inside the all-reduce. That wait is communication, not Python: a ``--profile-steps`` trace must not
turn it into a host.python finding. Truth per rank: steps and optimizer time.

Usage: torchrun --nproc-per-node 2 workloads/ddp_gloo.py [--steps N] [--straggle-ms MS]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from _truth import Truth, timed_optimizer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--straggle-ms", type=float, default=10.0)
    a = ap.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    truth = Truth(f"ddp_gloo_rank{rank}")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 8)))
    opt = timed_optimizer(torch.optim.SGD, truth)(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 8, (32,))
    for _ in range(a.steps):
        t0 = time.perf_counter()
        if rank == 1:
            time.sleep(a.straggle_ms / 1e3)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        truth.steps.append(time.perf_counter() - t0)
    truth.values["rank"] = rank
    truth.emit()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
