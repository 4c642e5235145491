"""The demo's training job: a small MLP classifier on synthetic images, with or without a planted
input-pipeline stall.

``--planted``: ``num_workers=0`` and a costly per-sample transform, so the training loop waits on data.
``--fixed``: the same transform, run by DataLoader workers in parallel with training, with pinned memory
and persistent workers — what gpusleuth's input-bound finding recommends.
``--calibrate``: prints (one JSON line) how many transform rounds this machine needs for a planted stall
that the fixed run's workers remove with room to spare; ``gpusleuth demo`` passes that count to both runs.

Why calibrate: a fixed round count is a different demo on every machine. On a 2-core host the fixed run has
one loader worker, and with 16 rounds its batch took as long as the training step (ratio 1.0–1.25): the
"fixed" run still waited ≥ 20 % of its step now and then and read HIGH. On a GPU the step is ~100× shorter,
so the same transform left the fixed run input-bound on any worker count. Sized here, each fixed-run worker
needs :data:`WORKER_SHARE` of a step for its batch: the planted run waits 1 − 1/(1 + 0.6 × workers) of its
step (37 % with one worker) and the fixed one has 40 % of its step as margin.

It uses a GPU when one is present and the CPU otherwise. On CPU it pins torch to one intra-op thread so
the loader workers have a core of their own, as they would beside a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable

import numpy as np
import numpy.typing as npt
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

WORKER_SHARE = 0.6  # a fixed-run worker's batch transform, as a share of the training step it feeds
MAX_ROUNDS = 256
DEFAULT_ROUNDS = 16  # without calibration (the job run on its own, tests that want a set cost)

#: the training step's loss tensor: Any because torch leaves ``Tensor.backward`` untyped (and a module's
#: ``__call__`` returns Any), so a loss typed ``torch.Tensor`` could not be backpropagated under the strict check
Loss = Any


class SyntheticImages(Dataset[tuple[torch.Tensor, int]]):
    """64×64 "images" with a deliberately expensive per-sample augmentation (blur + normalize)."""

    def __init__(self, n: int, rounds: int):
        self.n, self.rounds = n, rounds

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        rng = np.random.default_rng(i)
        img: npt.NDArray[np.floating[Any]] = rng.standard_normal((64, 64)).astype(np.float32)
        for _ in range(self.rounds):  # the costly transform: repeated separable blur
            img = (np.roll(img, 1, 0) + img + np.roll(img, -1, 0)) / 3
            img = (np.roll(img, 1, 1) + img + np.roll(img, -1, 1)) / 3
            img = (img - img.mean()) / (img.std() + 1e-6)
        return torch.from_numpy(img.reshape(-1)), int(i % 10)


def fixed_workers() -> int:
    """The fixed run's loader workers: every core but the training loop's."""
    return max(1, (os.cpu_count() or 2) - 1)


def _model(device: torch.device) -> tuple[nn.Sequential, torch.optim.SGD, nn.CrossEntropyLoss]:
    model = nn.Sequential(nn.Linear(4096, 2048), nn.ReLU(), nn.Linear(2048, 256), nn.ReLU(), nn.Linear(256, 10))
    model = model.to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.01), nn.CrossEntropyLoss()


def _train_step(model: nn.Module, opt: torch.optim.Optimizer, loss_fn: nn.Module, x: torch.Tensor,
                y: torch.Tensor) -> Loss:
    loss: Loss = loss_fn(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def calibrate(batch: int, device: torch.device) -> dict[str, float]:
    """Times this machine's training step, a batch's transform with no rounds (the sample's creation) and with
    a few, interleaved (so a busy moment slows all three alike), and sizes the transform from their medians."""
    model, opt, loss_fn = _model(device)
    x, y = torch.randn(batch, 4096, device=device), torch.randint(0, 10, (batch,), device=device)
    sync: Callable[[], None] = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    probe_rounds = 4
    bare, probe = SyntheticImages(batch, 0), SyntheticImages(batch, probe_rounds)
    steps: list[float] = []
    bases: list[float] = []
    probes: list[float] = []
    for i in range(12):
        t0 = time.perf_counter()
        _train_step(model, opt, loss_fn, x, y)
        sync()
        t1 = time.perf_counter()
        for j in range(batch):
            bare[j]
        t2 = time.perf_counter()
        for j in range(batch):
            probe[j]
        if i >= 2:  # warm-up: allocator, kernels
            steps.append(t1 - t0)
            bases.append(t2 - t1)
            probes.append(time.perf_counter() - t2)
    step_s, base_s, probe_s = (float(np.median(v)) for v in (steps, bases, probes))
    round_s = max(probe_s - base_s, 1e-6) / probe_rounds
    workers = fixed_workers()
    n = int(round((WORKER_SHARE * step_s * workers - base_s) / round_s))
    return {"rounds": min(max(n, 1), MAX_ROUNDS), "step_ms": step_s * 1e3, "round_ms": round_s * 1e3,
            "base_ms": base_s * 1e3, "workers": workers, "worker_share": WORKER_SHARE}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--planted", action="store_true")
    mode.add_argument("--fixed", action="store_true")
    mode.add_argument("--calibrate", action="store_true")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--transform-rounds", type=int,
                        default=int(os.environ.get("GPUSLEUTH_DEMO_ROUNDS", str(DEFAULT_ROUNDS))))
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.calibrate:
        print(json.dumps(calibrate(args.batch, device)))
        return 0

    workers = args.workers if args.workers is not None else (0 if args.planted else fixed_workers())
    dataset = SyntheticImages(args.steps * args.batch, args.transform_rounds)
    loader = DataLoader(
        dataset, batch_size=args.batch, shuffle=False, num_workers=workers,
        pin_memory=args.fixed and cuda, persistent_workers=workers > 0,
        prefetch_factor=4 if workers > 0 else None,
    )
    model, opt, loss_fn = _model(device)
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = _train_step(model, opt, loss_fn, x, y)
    print(f"demo job done: {'planted' if args.planted else 'fixed'} stall, {workers} workers, "
          f"{args.transform_rounds} transform rounds, device {device}, final loss {loss.item():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
