"""The stall watch's detection latency, stack-dump time and cost (issue 33), on real 2-rank gloo jobs on CPU.

For each of ``--reps`` rounds, two recordings of tests/fixtures/hangs/hang_job.py under
``gpusleuth run -- torchrun --nproc_per_node 2`` where rank 1 waits on a lock before the all-reduce at step 10
(``block``, held ``--hold`` seconds, then it carries on): one with py-spy taking the stacks, one with py-spy
switched off (``GPUSLEUTH_PYSPY=0``: the hook's faulthandler signal). Per recording:

* **latency**: the stall record's ``seen_ns`` − the moment rank 1 blocked (``BLOCK_AT``, printed by the job);
  the threshold is its 10 s floor (~45 ms steps), so the watch's own delay is latency − 10 s;
* **dump**: seconds to take every process's stacks (both ranks, torchrun's agent);
* **watch CPU**: the recorder's thread-CPU in the watch over the recording, as a share of its wall time (it runs
  in the recorder process: the job's cost is CPU it takes from a shared host, not time in the training loop).

Then ``--ab`` pairs of a healthy run (``eval`` mode with a 0 s hold: no stall) with the watch on and
``--stall-after off``: the job's median step time each way.

    python benchmarks/stall_watch.py [--reps 3] [--hold 14] [--ab 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "fixtures" / "hangs" / "hang_job.py"


def _port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def record(out: Path, mode: str, steps: int, hold: float, env: dict[str, str], flags: list[str]) -> str:
    cmd = [sys.executable, "-m", "gpusleuth", "run", "--out", str(out), "--no-report", "--no-gpu", *flags, "--",
           sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", _port(), str(JOB), mode, str(steps), str(hold)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    if res.returncode != 0:
        raise SystemExit(f"recording failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return res.stdout


def step_p50(out: Path) -> float:
    from gpusleuth.sources.rundir import load_run

    run = load_run(out)
    st = run.steps
    d = (st["end_ns"] - st["start_ns"]) / 1e6
    return float(statistics.median(d[5:]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--hold", type=float, default=14.0)
    ap.add_argument("--ab", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="stall-bench-"))
    rows = []
    ways = [("py-spy", {})] if shutil.which("py-spy") else []
    ways.append(("faulthandler", {"GPUSLEUTH_PYSPY": "0"}))
    for rep in range(args.reps):
        for via, env in ways:
            out = tmp / f"{via}-{rep}"
            stdout = record(out, "block", 30, args.hold, env, [])
            blocked = int(next(line.split()[1] for line in stdout.splitlines() if line.startswith("BLOCK_AT")))
            recs = [json.loads(line) for line in (out / "stalls" / "stalls.jsonl").read_text().splitlines()]
            stall = recs[0]
            status = json.loads((out / "recorder.json").read_text())
            wall = (status["stopped_ns"] - status["started_ns"]) / 1e9
            rows.append({"via": via, "latency_s": (stall["seen_ns"] - blocked) / 1e9, "dump_s": stall["dump_s"],
                         "stacks": sum(1 for s in stall["stacks"] if s["path"]),
                         "watch_cpu_share": status["stall_watch"]["cpu_s"] / wall, "recovered": recs[-1]["kind"]})
            print(json.dumps(rows[-1]), flush=True)
    for via in dict.fromkeys(r["via"] for r in rows):
        mine = [r for r in rows if r["via"] == via]
        lat = [r["latency_s"] for r in mine]
        print(f"{via}: latency {min(lat):.2f}-{max(lat):.2f} s (median {statistics.median(lat):.2f}), dump "
              f"{statistics.median(r['dump_s'] for r in mine):.3f} s for {mine[0]['stacks']} processes, watch CPU "
              f"{100 * statistics.median(r['watch_cpu_share'] for r in mine):.3f} % of a core")
    on, off = [], []
    for k in range(args.ab):
        for flags, into in (([], on), (["--stall-after", "off"], off)) if k % 2 == 0 else \
                (((["--stall-after", "off"], off), ([], on))):
            out = tmp / f"ab-{k}-{len(into)}-{'off' if into is off else 'on'}"
            record(out, "eval", 200, 0.0, {}, flags)
            into.append(step_p50(out))
    if on:
        print(f"healthy job, step p50: watch on {statistics.median(on):.2f} ms {['%.2f' % x for x in on]}, "
              f"off {statistics.median(off):.2f} ms {['%.2f' % x for x in off]}, on/off "
              f"{statistics.median(on) / statistics.median(off):.3f}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
