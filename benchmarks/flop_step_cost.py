"""What the hook's FLOP count (one step under ``FlopCounterMode``, for MFU) costs a job, and where it is billed.

Each command runs under ``gpusleuth run``; from the recording: the counted step's duration against the median
of the other steady steps (the slow-down), the ``gpusleuth_flops`` phase the hook wrote (the excess billed to
gpusleuth instead of the job's compute and goodput), or the reason it did not count (a step longer than the
limit: 0.5 s without CUDA). Issue 31 item 8.

    python benchmarks/flop_step_cost.py -- python a.py --x 1 -- python b.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def measure(command: list[str], out: Path) -> dict:
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "run", "--out", str(out), "--no-report", "--",
                          *command], capture_output=True, text=True, timeout=900)
    if res.returncode != 0:
        return {"command": " ".join(command), "error": res.stderr[-500:]}
    from gpusleuth import load_run

    run = load_run(out)
    st = run.steps
    pids, counts = np.unique(st["pid"], return_counts=True)
    main = int(pids[np.argmax(counts)])
    mine = st.filter(st["pid"] == main).sort_by("start_ns")
    dur = (mine["end_ns"] - mine["start_ns"]) / 1e9
    flops = next((i for i in run.infos if i.get("kind") == "flops" and i.get("pid") == main), None)
    skipped = next((i for i in run.infos if i.get("kind") == "flops_skipped" and i.get("pid") == main), None)
    ph = run.phases
    billed = float(((ph["end_ns"] - ph["start_ns"])[ph["name"] == "gpusleuth_flops"]).sum() / 1e9) if len(ph) else 0.0
    row = {"command": " ".join(command), "steps": int(len(dur))}
    if flops is not None:
        k = int(flops["step"])
        others = np.delete(dur[2:], k - 2) if k >= 2 else dur[2:]
        med = float(np.median(others))
        row.update(counted_s=float(dur[k]), median_step_s=med, slowdown=float(dur[k] / med) if med else None,
                   billed_s=billed, run_s=float(run.wall_s or 0.0))
    elif skipped is not None:
        row.update(skipped=skipped.get("why"))
    return row


def main(argv: list[str]) -> None:
    commands, cur = [], []
    for a in argv:
        if a == "--":
            if cur:
                commands.append(cur)
            cur = []
        else:
            cur.append(a)
    if cur:
        commands.append(cur)
    with tempfile.TemporaryDirectory() as tmp:
        for i, cmd in enumerate(commands):
            print(json.dumps(measure(cmd, Path(tmp) / f"r{i}")), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
