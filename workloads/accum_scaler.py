"""Gradient accumulation with a ``GradScaler``: ``--accum`` backward passes per optimizer step, the
step taken through ``scaler.step(optimizer)``. One training step is one optimizer step (not one
backward). Truth: optimizer steps, the optimizer's own time, the time of each accumulation window.

Usage: python workloads/accum_scaler.py [--steps N] [--accum K]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from _truth import Truth, timed_optimizer  # noqa: E402

TRUTH = Truth("accum_scaler")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--accum", type=int, default=4)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    n = a.steps * a.accum * 16
    loader = DataLoader(TensorDataset(torch.randn(n, 128), torch.randint(0, 10, (n,))), batch_size=16)
    model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
    opt = timed_optimizer(torch.optim.AdamW, TRUTH)(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    t0 = time.perf_counter()
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y) / a.accum
        scaler.scale(loss).backward()
        if (i + 1) % a.accum == 0:
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            TRUTH.steps.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
    TRUTH.values["samples_per_step"] = 16 * a.accum
    TRUTH.emit()


if __name__ == "__main__":
    main()
