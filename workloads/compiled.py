"""A ``torch.compile``d model (inductor on CPU): the first steps compile, the rest run the compiled graph.
Checks that gpusleuth's per-step hooks (the first-forward hook armed each step) cause no recompilation and
that compile time is start-up, not a slow step finding. Truth: steps, compile (first step) and steady
step times, and dynamo's own count of compiled frames.

Usage: python workloads/compiled.py [--steps N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from _truth import Truth, timed_optimizer  # noqa: E402

TRUTH = Truth("compiled")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 8))
    cmodel = torch.compile(model)
    opt = timed_optimizer(torch.optim.AdamW, TRUTH)(model.parameters(), lr=1e-3)
    for _ in range(a.steps):
        t0 = time.perf_counter()
        x, y = torch.randn(32, 64), torch.randint(0, 8, (32,))
        torch.nn.functional.cross_entropy(cmodel(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        TRUTH.steps.append(time.perf_counter() - t0)
    from torch._dynamo.utils import counters

    TRUTH.values["frames_compiled"] = int(counters["stats"]["unique_graphs"])
    TRUTH.values["recompiles"] = sum(counters["recompiles"].values()) if counters.get("recompiles") else 0
    TRUTH.values["first_step_s"] = TRUTH.steps[0]
    TRUTH.emit()


if __name__ == "__main__":
    main()
