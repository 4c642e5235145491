"""A small CPU training loop whose optimizer update is cheap except on a few steps, the way a shared host
preempts a job now and then (or the first step builds the optimizer's state): ``--every N --outlier-ms M``
makes every Nth ``optimizer.step()`` M ms longer. ``--fixed-ms F`` makes every update F ms longer instead:
a real fixed per-step cost, which a larger batch does amortize.

Usage: python tests/jobs/optimizer_outliers.py [--steps N] [--every N] [--outlier-ms M] [--fixed-ms F]
"""

import argparse
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=6)
    ap.add_argument("--outlier-ms", type=float, default=0.0)
    ap.add_argument("--fixed-ms", type=float, default=0.0)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    calls = [0]

    class Sgd(torch.optim.SGD):
        def step(self, closure=None):
            calls[0] += 1
            extra = a.fixed_ms + (a.outlier_ms if calls[0] % a.every == 0 else 0.0)
            if extra:
                time.sleep(extra / 1e3)
            return super().step(closure)

    opt = Sgd(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 128), torch.randint(0, 10, (64,))
    for _ in range(a.steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


if __name__ == "__main__":
    main()
