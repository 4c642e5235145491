"""Instrumentation cost per training step of gpusleuth's hook (issue 2; target <= 20 us per step).

A deliberately tiny training step — one DataLoader fetch from an in-memory dataset, forward, backward and
``optimizer.step()`` of a 4->1 linear model, one thread — so that the hook's fixed per-step work is as
large a share of the step as it will ever be. Two variants: ``loader`` (DataLoader + optimizer: the
common case) and ``backward`` (no DataLoader, no optimizer: backward-delimited steps).

Two measurements, CPU time per step (on a shared machine other jobs inflate wall time, not our CPU time):

* **in-process A/B** (the headline): one child started exactly as ``gpusleuth run`` starts a job
  (``PYTHONPATH=<hook dir>``, ``GPUSLEUTH_RUN_DIR``) switches the hook's patches off and on between
  interleaved repeats of the same loop; median(on) - median(off). Same process, same memory layout, so
  the difference is the hook's per-step work and nothing else.
* **separate processes**: the same loop in child processes with and without the hook, alternating which
  runs first; median(hook) - median(no hook). Includes everything (import-time finder, atexit, buffers)
  but also process-to-process noise of a few microseconds.

    python benchmarks/hook_overhead.py [--steps 2000] [--reps 12] [--pairs 5]

``--against DIR`` compares two versions of the hook instead (DIR: a copy of ``src/gpusleuth/hook`` from
another commit, e.g. ``git archive REV src/gpusleuth/hook | tar -x -C /tmp/old``): children with this hook,
with DIR's and with none alternate over ``--pairs`` rounds; CPU time per step of each, and this ÷ DIR.
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
import importlib, json, sys, time, torch
from torch.utils.data import DataLoader, TensorDataset
torch.set_num_threads(1)
variant, steps, reps, how = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
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

def timed():
    c0 = time.process_time_ns()
    epoch()
    return (time.process_time_ns() - c0) / steps

epoch()  # warm-up: first-call costs, the allocator, the hook's one-time work
if how == "plain":
    print(json.dumps([timed() for _ in range(reps)]))
    sys.exit(0)

# in-process A/B: the hook's patches carry __wrapped__; its optimizer hooks sit in torch's global dicts
optim = importlib.import_module("torch.optim.optimizer")
base = torch.utils.data.dataloader._BaseDataLoaderIter
on = dict(nxt=base.__next__, init=base.__init__, bw=torch.autograd.backward,
          pre=dict(optim._global_optimizer_pre_hooks), post=dict(optim._global_optimizer_post_hooks))
assert on["pre"] and hasattr(on["nxt"], "__wrapped__"), "the hook is not active in this child"

def switch(enabled):
    if enabled:
        base.__next__, base.__init__, torch.autograd.backward = on["nxt"], on["init"], on["bw"]
        optim._global_optimizer_pre_hooks.update(on["pre"])
        optim._global_optimizer_post_hooks.update(on["post"])
    else:
        base.__next__, base.__init__ = on["nxt"].__wrapped__, on["init"].__wrapped__
        torch.autograd.backward = getattr(on["bw"], "__wrapped__", on["bw"])  # released once optimizers step
        for k in on["pre"]:
            optim._global_optimizer_pre_hooks.pop(k, None)
        for k in on["post"]:
            optim._global_optimizer_post_hooks.pop(k, None)

out = {"on": [], "off": []}
for i in range(reps):
    for enabled in ((True, False) if i % 2 else (False, True)):
        switch(enabled)
        epoch()
        out["on" if enabled else "off"].append(timed())
switch(True)
print(json.dumps(out))
"""


def run_child(variant: str, hook: bool, how: str, steps: int, reps: int, run_dir: Path, hook_dir: Path = HOOK_DIR):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSLEUTH_")}
    env["OMP_NUM_THREADS"] = "1"
    if hook:
        env["PYTHONPATH"] = str(hook_dir)
        env["GPUSLEUTH_RUN_DIR"] = str(run_dir)
    else:
        env.pop("PYTHONPATH", None)
    res = subprocess.run([sys.executable, "-c", CHILD, variant, str(steps), str(reps), how], env=env,
                         capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"benchmark child failed ({variant}, {how}, hook={hook}):\n{res.stderr}")
    if hook:  # the hook must really have recorded the steps, or we measured nothing
        lines = [ln for p in (run_dir / "raw").glob("events-*.tsv") for ln in p.read_text().splitlines()]
        assert not any("hook_error" in ln for ln in lines), lines
        n_steps = sum(1 for ln in lines if ln.startswith("S\t"))
        expect = steps * (reps + 1)  # the warm-up and the repeats with the hook on
        assert n_steps >= expect, (n_steps, expect)
    return json.loads(res.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2000, help="steps per timed repeat")
    ap.add_argument("--reps", type=int, default=12, help="timed repeats (per setting) inside each process")
    ap.add_argument("--pairs", type=int, default=5, help="hook/no-hook process pairs (separate-process method)")
    ap.add_argument("--variants", default="loader,backward")
    ap.add_argument("--against", type=Path, help="another hook directory: compare the two instead")
    args = ap.parse_args()
    if args.against is not None:
        compare(args, args.against.resolve())
        return

    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"{args.steps} steps per repeat; CPU time per step, medians")
    print(f"{'variant':<9} {'method':<20} {'without hook':>13} {'with hook':>11} {'cost/step':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variants.split(","):
            ab = run_child(variant, True, "ab", args.steps, args.reps, Path(tmp) / f"{variant}-ab")
            off, on = statistics.median(ab["off"]) / 1e3, statistics.median(ab["on"]) / 1e3
            print(f"{variant:<9} {'in-process A/B':<20} {off:>10.1f} us {on:>8.1f} us {on - off:>7.1f} us")
            base: list[float] = []
            hooked: list[float] = []
            for i in range(args.pairs):
                for hook in ((False, True) if i % 2 == 0 else (True, False)):
                    run_dir = Path(tmp) / f"{variant}-{i}-{int(hook)}"
                    (hooked if hook else base).extend(
                        run_child(variant, hook, "plain", args.steps, max(3, args.reps // 3), run_dir))
            b, h = statistics.median(base) / 1e3, statistics.median(hooked) / 1e3
            print(f"{variant:<9} {'separate processes':<20} {b:>10.1f} us {h:>8.1f} us {h - b:>7.1f} us")


def compare(args, other: Path) -> None:
    """This hook against ``other`` (and no hook), alternating child processes: median over ``--pairs`` rounds
    of each child's median CPU µs per step."""
    print(f"# this hook {HOOK_DIR} vs {other}; {args.steps} steps per repeat; CPU time per step, medians")
    dirs = {"this": HOOK_DIR, "other": other, "none": None}
    with tempfile.TemporaryDirectory() as tmp:
        for variant in args.variants.split(","):
            times: dict[str, list[float]] = {k: [] for k in dirs}
            for i in range(args.pairs):
                for k in (list(dirs) if i % 2 == 0 else list(reversed(dirs))):
                    got = run_child(variant, dirs[k] is not None, "plain", args.steps, max(3, args.reps // 3),
                                    Path(tmp) / f"{variant}-{k}-{i}", dirs[k] or HOOK_DIR)
                    times[k].append(statistics.median(got) / 1e3)
            m = {k: statistics.median(v) for k, v in times.items()}
            print(f"{variant:<9} this {m['this']:.1f} us, other {m['other']:.1f} us, no hook {m['none']:.1f} us: "
                  f"hook cost {m['this'] - m['none']:.1f} vs {m['other'] - m['none']:.1f} us/step, "
                  f"step time this/other {m['this'] / m['other']:.3f} (rounds this "
                  f"{' '.join(f'{x:.1f}' for x in times['this'])}; other {' '.join(f'{x:.1f}' for x in times['other'])}); "
                  f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
