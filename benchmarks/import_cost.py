"""Time and peak memory of `gpusleuth report` on big imported files (issue 14).

Generates, from the real fixtures (every value a real sample or a real row):
  * a 24 h × 8 GPU nvidia-smi --query-gpu CSV at 1 Hz (691,200 rows, header with units), rows taken
    from the real plato log (beam11221/plato) with the GPU index and timestamp rewritten;
  * an Nsight Systems export of about 100 MB, made by replicating the kernel / memcpy / memset / runtime /
    NVTX rows of the real h100_2gpu_1s.sqlite (GindaChen/nsys-ai) shifted in time, copy after copy;
then runs `python -m gpusleuth report FILE --json` on each in a child process, interleaved with the peer a
user would otherwise reach for — pandas loading the same file (`read_csv` of the log; `read_sql` of the
export's kernel table), load only, no analysis — and reports median wall times, the ratio, and the peak RSS
(getrusage of the child).

    python benchmarks/import_cost.py --repeats 5
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLATO = REPO / "tests/fixtures/nvidia-smi/plato_gpu_log_noheader.csv"
H100 = REPO / "tests/fixtures/nsys/h100_2gpu_1s.sqlite"
HEADER = ("timestamp, index, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], "
          "temperature.gpu, power.draw [W]")


def make_nvsmi(path: Path, hours: float = 24, gpus: int = 8) -> int:
    rows = [[c.strip() for c in ln.split(",")][1:] for ln in PLATO.read_text().splitlines() if ln.strip()]
    n = int(hours * 3600)
    t0 = time.mktime((2026, 5, 1, 0, 0, 0, 0, 0, -1))
    with open(path, "w") as f:
        f.write(HEADER + "\n")
        for s in range(n):
            stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(t0 + s))
            for g in range(gpus):
                r = rows[(s + 97 * g) % len(rows)]
                f.write(f"{stamp}.{g:03d}, {g}, {', '.join(r)}\n")
    return n * gpus


TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
          "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS")


def make_nsys(path: Path, target_mb: float = 100) -> int:
    shutil.copy(H100, path)
    con = sqlite3.connect(path)
    first, last = con.execute("select min(start), max(end) from CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    span = last - first + 1000
    cutoff = max(con.execute(f"select max(start) from {t}").fetchone()[0] or 0 for t in TABLES)  # the originals
    copies = 0
    while path.stat().st_size < target_mb * 1e6:
        copies += 1
        for t in TABLES:
            cols = [r[1] for r in con.execute(f"PRAGMA table_info({t})")]
            sel = ", ".join(f"{c} + {span * copies}" if c in ("start", "end") else
                            (f"{c} + {copies * 10_000_000}" if c == "correlationId" else c) for c in cols)
            con.execute(f"insert into {t} ({', '.join(cols)}) select {sel} from {t} where start <= {cutoff}")
        con.commit()
    kernels = con.execute("select count(*) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    con.close()
    return kernels


def timed_report(path: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "report", str(path), "--json", "--tz", "UTC"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    if res.returncode:
        raise SystemExit(res.stderr)
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(rss, before) / 1024  # MiB (ru_maxrss is KiB on Linux; a max over children so far)


PEERS = {
    "nvsmi": "import pandas as pd,sys; pd.read_csv(sys.argv[1], skipinitialspace=True)",
    "nsys": ("import pandas as pd,sqlite3,sys; c=sqlite3.connect(sys.argv[1]); "
             "pd.read_sql('select * from CUPTI_ACTIVITY_KIND_KERNEL', c)"),
}


def timed_peer(name: str, path: Path) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", PEERS[name], str(path)], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def peak_rss(path: Path) -> float:
    """Peak RSS of one report child on its own (a fresh process tree so the max is this child's)."""
    code = ("import resource,subprocess,sys;"
            f"subprocess.run([sys.executable,'-m','gpusleuth','report',{str(path)!r},'--json','--tz','UTC'],"
            "stdout=subprocess.DEVNULL,check=True);"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024)")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hours", type=float, default=24)
    ap.add_argument("--nsys-mb", type=float, default=100)
    ap.add_argument("--keep", type=Path, default=None, help="write the generated files here and keep them")
    args = ap.parse_args()
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="gpusleuth-import-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    csv, db = tmp / "nvsmi_24h_8gpu.csv", tmp / "nsys_big.sqlite"
    rows = make_nvsmi(csv, args.hours)
    kernels = make_nsys(db, args.nsys_mb)
    print(f"nvidia-smi CSV: {rows:,} rows, {csv.stat().st_size / 1e6:.1f} MB; "
          f"nsys export: {kernels:,} kernels, {db.stat().st_size / 1e6:.1f} MB")
    walls: dict[str, list[float]] = {"nvsmi": [], "nsys": []}
    peers: dict[str, list[float]] = {"nvsmi": [], "nsys": []}
    for _ in range(args.repeats):  # interleaved
        for name, path in (("nvsmi", csv), ("nsys", db)):
            walls[name].append(timed_report(path)[0])
            peers[name].append(timed_peer(name, path))
    for name, path in (("nvsmi", csv), ("nsys", db)):
        w, p = statistics.median(walls[name]), statistics.median(peers[name])
        print(f"{name}: report wall median {w:.2f} s (min {min(walls[name]):.2f}, max {max(walls[name]):.2f}, "
              f"n={len(walls[name])}); pandas load-only {p:.2f} s; ratio {w / p:.2f}; peak RSS "
              f"{peak_rss(path):.0f} MiB; file {path.stat().st_size / 1e6:.1f} MB")
    if not args.keep:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
