"""Shared plumbing for the scenario scripts: ``--planted``/``--fixed``, a truth file with the loop's own
timing, and small models/datasets. Scenario scripts must run standalone (`python scenarios/x.py --planted`)
and under `gpusleuth run`; they pin torch to one intra-op thread on CPU (unless the scenario is about
threads) so a shared 2-core machine gives stable numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def parse(description: str, extra=None):
    p = argparse.ArgumentParser(description=description)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--planted", action="store_true")
    mode.add_argument("--fixed", action="store_true")
    p.add_argument("--truth", default=os.environ.get("SCENARIO_TRUTH"), help="write the loop's timing here (JSON)")
    p.add_argument("--scale", type=float, default=float(os.environ.get("SCENARIO_SCALE", "1")),
                   help="multiply the number of steps (longer, steadier runs)")
    if extra:
        extra(p)
    return p.parse_args()


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class Loop:
    """Times the training loop in steady state — from the end of the first step to the end of the last —
    and counts the samples in between; writes the truth file. The first step carries one-off costs
    (DataLoader worker start-up, lazy init) that the fix does not change, and the rules leave it out too."""

    def __init__(self, args):
        self.args = args
        self.t0 = None
        self.last = None
        self.samples = 0
        self.steps = 0
        # steps whose time is not the job's (a profiler window and its export, set by run_all for runs
        # recorded with --profile-steps): left out of the truth, or the measured speedup would include
        # gpusleuth's own profiling cost
        lo, _, hi = os.environ.get("SCENARIO_EXCLUDE_STEPS", "").partition("-")
        self.exclude = range(int(lo), int(hi) + 1) if lo and hi else range(0)
        self.excluded_s = 0.0

    def start(self):
        if self.t0 is None:
            self.t0 = time.perf_counter()

    def step(self, samples: int):
        self.start()
        now = time.perf_counter()
        index = self.steps  # 0-based, as gpusleuth counts steps
        self.steps += 1
        if self.steps == 1:
            self.t0 = self.last = now  # steady state starts after the first step
            return
        if index in self.exclude:
            self.excluded_s += now - self.last
        else:
            self.samples += samples
        self.last = now

    def train(self, loader, model, opt):
        """The plain loop most scenarios share: one optimizer step per batch, timed, then the truth file."""
        self.start()
        for x, y in loader:
            train_step(model, opt, x, y)
            self.step(len(x))
        self.done()

    def done(self, **extra):
        loop = time.perf_counter() - (self.t0 or time.perf_counter()) - self.excluded_s
        if self.args.truth:
            with open(self.args.truth, "w") as f:
                json.dump({"loop_s": loop, "steps": self.steps, "samples": self.samples,
                           "excluded_s": self.excluded_s, "excluded_steps": len(self.exclude),
                           "samples_per_s": self.samples / loop if loop > 0 else None, **extra}, f)
        print(f"{'planted' if self.args.planted else 'fixed'}: {self.steps} steps, {self.samples} samples, "
              f"{loop:.2f} s")


def remote_shards(steps: int, batch: int, latency_s: float, features: int = 512):
    """A dataset of ``steps`` batches, each read after ``latency_s`` of waiting and no CPU — a shard from
    object storage or a slow network file system (``DataLoader(..., batch_size=None)`` over it)."""
    import torch
    from torch.utils.data import Dataset

    class RemoteShards(Dataset):
        def __len__(self):
            return steps

        def __getitem__(self, i):
            time.sleep(latency_s)
            g = torch.Generator().manual_seed(i)
            return torch.randn(batch, features, generator=g), torch.randint(0, 10, (batch,), generator=g)

    return RemoteShards()


def memory_loader(x, y, batch: int):
    """A DataLoader over tensors already in memory that fetches each batch with one gather.

    The default ``DataLoader(TensorDataset(...), batch_size=B)`` indexes B samples one by one and collates
    them in the training thread — about 10 µs a sample, a real input cost on a small step that would put
    an ``input.*`` finding into scenarios whose plant is elsewhere. Data already in memory should cost
    nothing to load, so these scenarios load it the way a tuned job does.
    """
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

    data = TensorDataset(x, y)
    return DataLoader(data, batch_size=None, sampler=BatchSampler(SequentialSampler(data), batch, drop_last=False))


def mlp(d_in: int, width: int, depth: int = 2, d_out: int = 10):
    from torch import nn

    layers, d = [], d_in
    for _ in range(depth):
        layers += [nn.Linear(d, width), nn.ReLU()]
        d = width
    layers.append(nn.Linear(d, d_out))
    return nn.Sequential(*layers)


def train_step(model, opt, x, y):
    import torch.nn.functional as F

    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss
