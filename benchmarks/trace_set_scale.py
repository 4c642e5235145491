"""A trace set of many ranks: wall time and peak memory of the whole process tree, by ranks × size, for
``gpusleuth report`` in-process (``--jobs 1``), with its local process pool (default / ``--jobs N``), on a
local Ray cluster (``--ray``), and HTA 0.5.0 (``TraceAnalysis(trace_dir=...)``: one process holding all).

    # once: HTA in a throwaway venv outside the repo (as for benchmarks/trace_load.py)
    python -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install HolisticTraceAnalysis==0.5.0
    python benchmarks/trace_set_scale.py --grid 4x10 4x50 16x10 16x50 64x50 --hta-max-mb 800

Rank files are built under /tmp (never committed) from a real 2-rank job's trace
(``tests/fixtures/hta/nccl_parser_config``: A100, NCCL kernels, 3 steps) with ``trace_load._replicated``
(events copied with shifted timestamps, ids and step numbers until the JSON is the size asked), one gzip
file per rank whose ``distributedInfo`` names its rank. Each cell is a fresh child process; peak memory is
the largest sum of RSS over the child and all its descendants (pool workers; Ray's GCS, raylet and
workers), polled every 50 ms — a sum of RSS counts shared pages once per process, so it overstates a tree
a little, never understates it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from trace_load import _replicated  # noqa: E402  (the repo's one trace replicator)

SOURCE = HERE.parent / "tests" / "fixtures" / "hta" / "nccl_parser_config" / "nccl_data.json.gz"

HTA = """
import sys, time, json, logging, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=True)
for call in (lambda: ta.get_temporal_breakdown(visualize=False), lambda: ta.get_idle_time_breakdown(visualize=False),
             lambda: ta.get_gpu_kernel_breakdown(visualize=False), lambda: ta.get_comm_comp_overlap(visualize=False),
             lambda: ta.get_cuda_kernel_launch_stats(visualize=False)):
    try:
        call()
    except Exception as e:
        print(type(e).__name__, file=sys.stderr)
print(json.dumps({"ranks": len(ta.t.traces)}))
"""


def build_set(ranks: int, mb: int, root: Path) -> Path:
    """``ranks`` gzip trace files of about ``mb`` MB of JSON each, in their own directory (written once)."""
    d = root / f"{ranks}x{mb}"
    if (d / "done").exists():
        return d
    d.mkdir(parents=True, exist_ok=True)
    import msgspec

    enc = msgspec.json.Encoder()
    head, events = _replicated(SOURCE, mb)
    body = b",\n".join(enc.encode(e) for e in events)
    for r in range(ranks):
        dist = dict(head.get("distributedInfo") or {}, rank=r, world_size=ranks)
        with gzip.open(d / f"rank-{r}.json.gz", "wb", compresslevel=1) as f:
            f.write(b'{\n  "schemaVersion": 1,\n  "deviceProperties": ' + enc.encode(head.get("deviceProperties", []))
                    + b',\n  "distributedInfo": ' + json.dumps(dist).encode()  # Kineto's '"rank": 0' (HTA's regex)
                    + b',\n  "traceEvents": [\n')
            f.write(body)
            f.write(b'\n  ],\n  "traceName": "replicated"\n}\n')
    (d / "done").touch()
    return d


def measure(cmd: list[str], timeout: float, pythonpath: str | None = None) -> dict:
    """Wall seconds and the peak summed RSS (MiB) of the child's whole process tree."""
    import tempfile

    err = tempfile.TemporaryFile()  # files, not pipes: an unread pipe would stall the child's report
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err,
                         env={**os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {})})
    proc = psutil.Process(p.pid)
    peak = 0
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)  # its rusage counts the workers it reaped
        if pid:
            break
        try:
            tree = [proc] + proc.children(recursive=True)
            rss = 0
            for q in tree:
                try:
                    rss += q.memory_info().rss
                except psutil.Error:
                    pass
            peak = max(peak, rss)
        except psutil.Error:
            pass
        if time.perf_counter() - t > timeout:
            p.kill()
            os.waitpid(p.pid, 0)
            p.returncode = -9
            return {"wall": None, "rss_mb": peak / 2**20, "error": "timeout"}
        time.sleep(0.05)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    res = {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_mb": peak / 2**20}
    if p.returncode != 0:
        err.seek(0)
        res["error"] = err.read().decode(errors="replace")[-300:]
    return res


def tools(d: Path, hta_python: str | None, with_hta: bool) -> dict[str, list[str]]:
    files = sorted(str(p) for p in d.glob("rank-*.json.gz"))
    report = [sys.executable, "-m", "gpusleuth", "report", *files, "--json"]
    # the pool with 2 workers (this machine's cores) even where the default would stay in-process: the
    # crossover that sets SMALL_SET_BYTES
    out = {"in-process": report + ["--jobs", "1"], "pool": report + ["--jobs", "2"], "ray-local": report + ["--ray"]}
    if with_hta and hta_python:
        out["HTA"] = [hta_python, "-c", HTA, str(d)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", nargs="+", default=["4x10", "4x50", "16x10", "16x50"], help="RANKSxMB cells")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/gpusleuth-trace-set"))
    ap.add_argument("--hta-python", default="/tmp/htavenv/bin/python")
    ap.add_argument("--hta-max-mb", type=int, default=800, help="skip HTA above this much JSON in all")
    ap.add_argument("--only", nargs="*", default=None, help="tools to run (in-process pool ray-local HTA)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--against", metavar="SRC", help="also run each gpusleuth tool from this source tree (another "
                    "checkout's src/) as '<tool> before', interleaved")
    args = ap.parse_args()
    hta = args.hta_python if Path(args.hta_python).exists() else None
    rows = []
    for cell in args.grid:
        ranks, mb = (int(x) for x in cell.split("x"))
        d = build_set(ranks, mb, args.tmp)
        cmds = tools(d, hta, ranks * mb <= args.hta_max_mb)
        if args.only:
            cmds = {k: v for k, v in cmds.items() if k in args.only}
        paths: dict[str, str | None] = {k: None for k in cmds}
        if args.against:
            for k in [k for k in cmds if k != "HTA"]:
                cmds[f"{k} before"], paths[f"{k} before"] = cmds[k], args.against
            cmds = dict(sorted(cmds.items()))
        got: dict[str, list[dict]] = {k: [] for k in cmds}
        for _ in range(args.reps):  # tools interleaved within each repetition
            for name, cmd in cmds.items():
                got[name].append(measure(cmd, args.timeout, paths.get(name)))
                print(f"{cell} {name}: {got[name][-1]}", file=sys.stderr, flush=True)
        for name, ms in got.items():
            ok = [m for m in ms if m["wall"] is not None and "error" not in m]
            rows.append({"ranks": ranks, "mb": mb, "tool": name, "load": os.getloadavg()[0],
                         "wall": statistics.median(m["wall"] for m in ok) if ok else None,
                         "cpu": statistics.median(m["cpu"] for m in ok) if ok else None,
                         "rss_mb": statistics.median(m["rss_mb"] for m in ok) if ok else None,
                         "error": None if ok else ms[-1].get("error")})
    print(json.dumps(rows, indent=1))
    print("| ranks × JSON MB | tool | wall s | CPU s (tree) | peak RSS MiB (tree) |\n|---|---|---|---|---|")
    for r in rows:
        wall = f"{r['wall']:.1f}" if r["wall"] is not None else r["error"]
        rss = f"{r['rss_mb']:.0f}" if r["rss_mb"] is not None else "–"
        cpu = f"{r['cpu']:.1f}" if r.get("cpu") is not None else "–"
        print(f"| {r['ranks']} × {r['mb']} | {r['tool']} | {wall} | {cpu} | {rss} |")


if __name__ == "__main__":
    main()
