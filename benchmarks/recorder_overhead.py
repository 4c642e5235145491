"""Overhead of ``gpusleuth run`` on a CPU training loop, and the recorder's own CPU use.

Two measurements, both as medians over interleaved repetitions (machines are noisy):

1. Step-time ratio: the same small PyTorch training loop run bare and under ``gpusleuth run`` (recorder
   at 10 Hz + instrumentation hook), alternating A/B, each run timing its own steps with perf_counter.
   Ratio = median step time under gpusleuth ÷ bare, per pair; the median of the pair ratios is reported.
   Target ≤ 1.01.
2. Recorder CPU: ``gpusleuth run -- sleep S`` with the recorder sampling at 10 Hz (default); the recorder
   process reports its own user+system CPU seconds (getrusage) in meta.json. Target ≤ 2 % of one core.

Usage: python benchmarks/recorder_overhead.py [--pairs 7] [--steps 300] [--sleep 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

TRAIN = textwrap.dedent(
    """
    import json, sys, time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    torch.manual_seed(0)
    torch.set_num_threads(1)
    steps = int(sys.argv[1])
    width = int(sys.argv[3])
    data = TensorDataset(torch.randn(32 * steps, 256), torch.randint(0, 10, (32 * steps,)))
    model = nn.Sequential(nn.Linear(256, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    t = time.perf_counter()
    for x, y in DataLoader(data, batch_size=32):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        now = time.perf_counter(); times.append(now - t); t = now
    times = times[20:]  # warm-up
    times.sort()
    json.dump({"median_step_s": times[len(times) // 2]}, open(sys.argv[2], "w"))
    """
)


def run_train(script: Path, steps: int, wrapped: bool, tmp: Path, i: int, width: int) -> float:
    out = tmp / f"res-{'w' if wrapped else 'b'}-{i}.json"
    cmd = [sys.executable, str(script), str(steps), str(out), str(width)]
    if wrapped:
        cmd = [sys.executable, "-m", "gpusleuth", "run", "--no-report", "--out", str(tmp / f"run-{i}"), "--", *cmd]
    subprocess.run(cmd, check=True, capture_output=True)
    return json.loads(out.read_text())["median_step_s"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--sleep", type=float, default=20.0)
    ap.add_argument("--width", type=int, default=512,
                    help="hidden width of the MLP: 512 gives a ~1.5 ms step (worst case), 2048 ~15 ms")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        script = tmp / "train.py"
        script.write_text(TRAIN)
        ratios, bare, wrapped = [], [], []
        for i in range(args.pairs):
            order = (False, True) if i % 2 == 0 else (True, False)  # interleave A/B and B/A
            res = {w: run_train(script, args.steps, w, tmp, i, args.width) for w in order}
            bare.append(res[False])
            wrapped.append(res[True])
            ratios.append(res[True] / res[False])
            print(f"pair {i}: bare {res[False] * 1e3:.3f} ms, gpusleuth {res[True] * 1e3:.3f} ms, "
                  f"ratio {ratios[-1]:.4f}", flush=True)
        cpu, total = [], []
        for i in range(3):
            out = tmp / f"sleep-{i}"
            subprocess.run([sys.executable, "-m", "gpusleuth", "run", "--no-report", "--out", str(out), "--",
                            "sleep", str(args.sleep)], check=True, capture_output=True)
            rec = json.loads((out / "meta.json").read_text())["recorder"]
            wall = (rec["stopped_ns"] - rec["started_ns"]) / 1e9
            steady_wall = (rec["stopped_ns"] - rec["init_ns"]) / 1e9
            cpu.append(100 * (rec["cpu_s"] - rec["init_cpu_s"]) / steady_wall)
            total.append(100 * rec["cpu_s"] / wall)
            print(f"recorder: {rec['cpu_s']:.3f} CPU-s over {wall:.1f} s at {rec['interval_s']} s interval "
                  f"({rec['samples']} samples), of which start-up {rec['init_cpu_s']:.3f} s; sampling = "
                  f"{cpu[-1]:.2f}% of one core, all-in {total[-1]:.2f}%", flush=True)
    print()
    print("| measure | median | target |")
    print("|---|---|---|")
    print(f"| step time under `gpusleuth run` ÷ bare ({args.pairs} interleaved pairs, {args.steps} steps each, width {args.width}) "
          f"| {statistics.median(ratios):.4f} (bare {statistics.median(bare) * 1e3:.3f} ms/step) | ≤ 1.01 |")
    print(f"| recorder CPU at 10 Hz, sampling (3 runs of {args.sleep:g} s) | {statistics.median(cpu):.2f}% of one core | ≤ 2 % |")
    print(f"| recorder CPU at 10 Hz, all-in incl. start-up | {statistics.median(total):.2f}% of one core | – |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
