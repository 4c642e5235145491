"""Instrumentation cost per training step of gpusleuth's hook (issue 2; target <= 20 us).

A deliberately tiny training step — one DataLoader fetch from an in-memory dataset, forward, backward and
``optimizer.step()`` of a 4->1 linear model, one thread — so that the hook's fixed per-step work is as
large a share of the step as it will ever be. The same loop runs in child processes with and without the
hook (``PYTHONPATH=<hook dir>`` + ``GPUSLEUTH_RUN_DIR``, exactly as ``gpusleuth run`` starts a job),
alternating which goes first, several repeats per process; we report medians and the difference.

Two variants: ``loader`` (DataLoader fetch + optimizer step, the common case) and ``backward`` (no
DataLoader and no optimizer: backward-delimited steps). CPU time per step is the headline (other jobs on a
shared machine inflate wall time, not our process's CPU time); wall time is shown next to it.

    python benchmarks/hook_overhead.py [--steps 3000] [--pairs 7] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HOOK_DIR = Path(__file__).resolve().parents[1] / "src" / "gpusleuth" / "hook"

CHILD = r"""
import json, sys, time, torch
from torch.utils.data import DataLoader, TensorDataset
torch.set_num_threads(1)
variant, steps, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
dl = DataLoader(TensorDataset(torch.randn(steps, 4), torch.randn(steps, 1)), batch_size=1)
xs = torch.randn(steps, 1, 4)

def loader_epoch():
    for x, y in dl:
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

def backward_epoch():
    w = model.weight
    for i in range(steps):
        loss = (xs[i] @ w.t()).pow(2).mean()
        loss.backward()
        w.grad = None

epoch = loader_epoch if variant == "loader" else backward_epoch
epoch()  # warm-up: first-call costs, allocator, the hook's one-time work
out = []
for _ in range(reps):
    t0, c0 = time.perf_counter_ns(), time.process_time_ns()
    epoch()
    out.append(((time.perf_counter_ns() - t0) / steps, (time.process_time_ns() - c0) / steps))
print(json.dumps(out))
"""


def run_child(variant: str, hook: bool, steps: int, reps: int, run_dir: Path) -> list[tuple[float, float]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLEUTH_")}
    env["OMP_NUM_THREADS"] = "1"
    if hook:
        env["PYTHONPATH"] = str(HOOK_DIR)
        env["GPUSLEUTH_RUN_DIR"] = str(run_dir)
    else:
        env.pop("PYTHONPATH", None)
    res = subprocess.run([sys.executable, "-c", CHILD, variant, str(steps), str(reps)], env=env,
                         capture_output=True, text=True, check=True)
    if hook:  # the hook must really have recorded every step, or we measured nothing
        lines = [ln for p in (run_dir / "raw").glob("events-*.tsv") for ln in p.read_text().splitlines()]
        n_steps = sum(1 for ln in lines if ln.startswith("S\t"))
        assert n_steps == steps * (reps + 1), (n_steps, steps * (reps + 1))
        assert not any("hook_error" in ln for ln in lines)
    return json.loads(res.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=3000, help="steps per timed repeat")
    ap.add_argument("--pairs", type=int, default=7, help="hook/no-hook process pairs per variant")
    ap.add_argument("--reps", type=int, default=5, help="timed repeats inside each process")
    ap.add_argument("--variants", default="loader,backward")
    args = ap.parse_args()

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, {args.steps} steps x {args.reps} repeats x {args.pairs} process pairs")
    print(f"{'variant':<10} {'cpu/step base':>14} {'cpu/step hook':>14} {'cost (cpu)':>11} "
          f"{'wall base':>10} {'wall hook':>10} {'cost (wall)':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variants.split(","):
            base: list[tuple[float, float]] = []
            hooked: list[tuple[float, float]] = []
            for i in range(args.pairs):
                order = (False, True) if i % 2 == 0 else (True, False)
                for hook in order:
                    run_dir = Path(tmp) / f"{variant}-{i}-{int(hook)}"
                    (hooked if hook else base).extend(run_child(variant, hook, args.steps, args.reps, run_dir))
            bw, bc = (statistics.median(v[k] for v in base) / 1e3 for k in (0, 1))
            hw, hc = (statistics.median(v[k] for v in hooked) / 1e3 for k in (0, 1))
            print(f"{variant:<10} {bc:>11.1f} us {hc:>11.1f} us {hc - bc:>8.1f} us "
                  f"{bw:>7.1f} us {hw:>7.1f} us {hw - bw:>9.1f} us")


if __name__ == "__main__":
    main()
