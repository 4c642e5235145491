"""The demo's training job: a small MLP classifier on synthetic images, with or without a planted
input-pipeline stall.

``--planted``: ``num_workers=0`` and a costly per-sample transform, so the training loop waits on data.
``--fixed``: the same transform, run by DataLoader workers in parallel with training, with pinned memory
and persistent workers — what gpusleuth's input-bound finding recommends.

It uses a GPU when one is present and the CPU otherwise. On CPU it pins torch to one intra-op thread so
the loader workers have a core of their own, as they would beside a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv=None) -> int:
    import numpy as np
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    parser = argparse.ArgumentParser()
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--planted", action="store_true")
    mode.add_argument("--fixed", action="store_true")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--transform-rounds", type=int, default=int(os.environ.get("GPUSLEUTH_DEMO_ROUNDS", "16")))
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        torch.set_num_threads(1)
    torch.manual_seed(0)

    class SyntheticImages(Dataset):
        """64×64 "images" with a deliberately expensive per-sample augmentation (blur + normalize)."""

        def __init__(self, n: int, rounds: int):
            self.n, self.rounds = n, rounds

        def __len__(self):
            return self.n

        def __getitem__(self, i):
            rng = np.random.default_rng(i)
            img = rng.standard_normal((64, 64)).astype(np.float32)
            for _ in range(self.rounds):  # the costly transform: repeated separable blur
                img = (np.roll(img, 1, 0) + img + np.roll(img, -1, 0)) / 3
                img = (np.roll(img, 1, 1) + img + np.roll(img, -1, 1)) / 3
                img = (img - img.mean()) / (img.std() + 1e-6)
            return torch.from_numpy(img.reshape(-1)), int(i % 10)

    workers = args.workers if args.workers is not None else (0 if args.planted else max(1, (os.cpu_count() or 2) - 1))
    dataset = SyntheticImages(args.steps * args.batch, args.transform_rounds)
    loader = DataLoader(
        dataset, batch_size=args.batch, shuffle=False, num_workers=workers,
        pin_memory=args.fixed and cuda, persistent_workers=workers > 0,
        prefetch_factor=4 if workers > 0 else None,
    )
    model = nn.Sequential(nn.Linear(4096, 2048), nn.ReLU(), nn.Linear(2048, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    print(f"demo job done: {'planted' if args.planted else 'fixed'} stall, {workers} workers, "
          f"device {device}, final loss {loss.item():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
