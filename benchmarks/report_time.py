"""CPU time of ``gpusleuth report INPUT --json`` for two commits, interleaved A/B pairs after one warm-up pair.

Each commit is unpacked with ``git archive`` into a folder of its own and run with ``PYTHONPATH=TREE/src``; CPU
time is user+sys of the child (``resource.getrusage(RUSAGE_CHILDREN)`` around each ``subprocess.run``): on a
shared 2-core box wall time is mostly waiting for a core. ``--bytecode``: compile both trees first
(``compileall``), as an installed package is; without it, every run compiles the sources it imports when the
environment sets PYTHONDONTWRITEBYTECODE (this machine does), so the amount of source imported is timed too.

    python benchmarks/report_time.py --base dc3347b --head HEAD --pairs 5 /tmp/demo/planted TRACE.json.gz
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def unpack(commit: str, root: Path, bytecode: bool) -> Path:
    tree = root / commit
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    if bytecode:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "src")], check=True,
                       env={**os.environ, "PYTHONDONTWRITEBYTECODE": ""})
    return tree


def cpu_of(tree: Path, target: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "report", target, "--json"], capture_output=True,
                         env={**os.environ, "PYTHONPATH": str(tree / "src")})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        raise SystemExit(f"{tree.name} on {target}: exit {res.returncode}: {res.stderr.decode()[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="+")
    ap.add_argument("--base", required=True)
    ap.add_argument("--head", default="HEAD")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--bytecode", action="store_true", help="compile both trees first (an installed package)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        a, b = (unpack(c, Path(tmp), args.bytecode) for c in (args.base, args.head))
        print(f"load average at start {os.getloadavg()[0]:.1f}; bytecode {'compiled' if args.bytecode else 'as the environment has it'}")
        for target in args.targets:
            cpu_of(a, target), cpu_of(b, target)  # warm-up pair (page cache)
            ratios, ta, tb = [], [], []
            for i in range(args.pairs):
                first, second = (a, b) if i % 2 == 0 else (b, a)
                t1, t2 = cpu_of(first, target), cpu_of(second, target)
                x, y = (t1, t2) if first is a else (t2, t1)
                ta.append(x)
                tb.append(y)
                ratios.append(y / x)
            print(f"{target}: {args.base} {statistics.median(ta):.3f} s, {args.head} {statistics.median(tb):.3f} s CPU; "
                  f"ratio median {statistics.median(ratios):.2f} (pairs: {', '.join(f'{r:.2f}' for r in ratios)})")
        print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
