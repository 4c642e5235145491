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
        self.samples = 0
        self.steps = 0

    def start(self):
        if self.t0 is None:
            self.t0 = time.perf_counter()

    def step(self, samples: int):
        self.start()
        self.steps += 1
        if self.steps == 1:
            self.t0 = time.perf_counter()  # steady state starts after the first step
            return
        self.samples += samples

    def done(self, **extra):
        loop = time.perf_counter() - (self.t0 or time.perf_counter())
        if self.args.truth:
            with open(self.args.truth, "w") as f:
                json.dump({"loop_s": loop, "steps": self.steps, "samples": self.samples,
                           "samples_per_s": self.samples / loop if loop > 0 else None, **extra}, f)
        print(f"{'planted' if self.args.planted else 'fixed'}: {self.steps} steps, {self.samples} samples, "
              f"{loop:.2f} s")


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
