"""A small real CPU training job with an evaluation phase every few steps (for the live-metrics tests).

Runs for about ``--seconds`` seconds; the DataLoader sleeps a little per batch so data wait is visible.
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

import gpusleuth


class Slow(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        time.sleep(0.0005)
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), torch.tensor(i % 4)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()
    end = time.monotonic() + args.seconds
    for i, (x, y) in enumerate(DataLoader(Slow(), batch_size=16)):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if i % 20 == 19:
            with gpusleuth.phase("eval"), torch.no_grad():
                model(torch.randn(256, 32))
                time.sleep(0.05)
        if time.monotonic() > end:
            break
    print("phased_train done after", i + 1, "steps")


if __name__ == "__main__":
    main()
