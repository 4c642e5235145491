"""How ``gpusleuth fleet`` scales with the number of runs (issue 15).

Generates N run directories (meta.json + summary.json, the files fleet reads; values varied from one real
summary, so DuckDB parses realistic records) under a scratch folder, then times the real CLI
(``python -m gpusleuth fleet DIR --json --price-per-gpu-hour 2``, a child process: start-up included)
for each N, interleaving the sizes in every round. Prints the median wall time per size and per run.

    python benchmarks/fleet_scale.py --sizes 100,1000,10000 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CAUSES = ["startup", "warmup", "data_wait", "eval", "checkpoint", "other_idle"]
FINDINGS = [("input.io", "Input-bound: the loader waits on storage / latency, not CPU"),
            ("input.preprocessing", "Input-bound: data preprocessing on the CPU is the bottleneck"),
            ("host.sync", "The step waits on host-device synchronisation"), (None, None)]


def make_runs(root: Path, n: int, seed: int = 0) -> Path:
    rnd = random.Random(seed)
    base = root / f"runs-{n}"
    base.mkdir()
    t0 = 1_790_000_000_000_000_000
    for i in range(n):
        d = base / f"run-{i:05d}"
        d.mkdir()
        gpus = rnd.choice([1, 2, 4, 8])
        wall = rnd.uniform(60, 36_000)
        price = 2.5
        badput = {c: wall * rnd.uniform(0, 0.15) for c in CAUSES}
        cause, title = rnd.choice(FINDINGS)
        start = t0 + i * 600_000_000_000
        (d / "meta.json").write_text(json.dumps({"format": 1, "label": f"job-{i % 50}", "start_ns": start}))
        (d / "summary.json").write_text(json.dumps({
            "label": f"job-{i % 50}", "path": str(d), "command": f"python train.py --seed {i}", "hostname": f"node-{i % 16}",
            "start_ns": start, "end_ns": start + int(wall * 1e9), "wall_s": wall, "exit_code": 0, "gpus": gpus,
            "gpu_model": "NVIDIA H100 80GB HBM3", "gpu_hours": gpus * wall / 3600, "steps": int(wall * 3),
            "samples_per_s": rnd.uniform(100, 5000), "step_time_p50_s": rnd.uniform(0.05, 1), "goodput": rnd.uniform(0.3, 0.95),
            "mfu": rnd.uniform(0.1, 0.5), "energy_j": wall * 500 * gpus, "price_per_gpu_hour": price,
            "cost_usd": gpus * wall / 3600 * price, "usd_per_second": gpus * price / 3600, "badput_s": badput,
            "lost_usd": {c: v * gpus * price / 3600 for c, v in badput.items()}, "findings": 2 if cause else 0,
            "top_finding": title, "top_cause": cause, "top_severity": "high" if cause else None,
            "top_gain_s": wall * 0.1 if cause else None, "top_gain_usd": None, "schema": "gpusleuth.summary/1"}) + "\n")
    return base


def time_fleet(base: Path) -> tuple[float, int]:
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "fleet", str(base), "--json", "--price-per-gpu-hour", "2"],
                         capture_output=True, text=True, check=True)
    return time.perf_counter() - t, json.loads(res.stdout)["runs"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="gpusleuth-fleet-bench-") as tmp:
        t = time.perf_counter()
        bases = {n: make_runs(Path(tmp), n) for n in sizes}
        print(f"generated {sum(sizes):,} run directories in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        times: dict[int, list[float]] = {n: [] for n in sizes}
        for _ in range(args.rounds):
            for n in sizes:  # interleaved: every round times every size
                dt, runs = time_fleet(bases[n])
                assert runs == n, (runs, n)
                times[n].append(dt)
    print("| runs | median wall (s) | min–max (s) | per run (ms) |")
    print("|---|---|---|---|")
    for n in sizes:
        med = statistics.median(times[n])
        print(f"| {n:,} | {med:.2f} | {min(times[n]):.2f}–{max(times[n]):.2f} | {med / n * 1e3:.3f} |")


if __name__ == "__main__":
    main()
