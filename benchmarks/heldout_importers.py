"""Held-out check of the importers (issue 14): `gpusleuth report FILE --json` against numbers computed here,
independently, from the same file — sqlite3 queries for Nsight Systems exports, pandas for nvidia-smi
`--query-gpu` CSV logs. The files are real ones from public repositories that the readers were not built
on (docs/importers.md lists them, with the repository, commit and path to fetch each from).

Nsight export, per device: kernel count and total time, memcpy count and time by direction and host memory
kind (copyKind, srcKind/dstKind by the export's own enums), memset count, the union of device-busy
intervals, device ops = kernels + copies + sets; and the findings' titles.

nvidia-smi CSV, per GPU: sample count, mean utilization, peak memory used, mean power. With an `index`
column the GPU is that index; without one it is the data row's number modulo the GPU count (nvidia-smi
writes every GPU, in order, on each tick) — a plain count that disagrees with the reader only where the
file itself lost rows of a tick. Trailing NUL bytes (a log cut while being written) are dropped.

    python benchmarks/heldout_importers.py FILE...
"""

from __future__ import annotations

import io
import json
import re
import sqlite3
import subprocess
import sys

import pandas as pd

COPY_DIR = {1: "h2d", 2: "d2h", 8: "d2d", 10: "p2p", 11: "uvm_h2d", 12: "uvm_d2h"}
HOST_MEM = {0: "pageable", 1: "pinned"}  # ENUM_CUDA_MEM_KIND of the export


def report(path: str) -> tuple[dict | None, str]:
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "report", path, "--json"], capture_output=True,
                         text=True)
    return (json.loads(res.stdout), "") if res.returncode == 0 else (None, res.stderr.strip())


def busy_union(intervals: list[tuple[int, int]]) -> int:
    intervals.sort()
    total, (cs, ce) = 0, intervals[0]
    for s, e in intervals[1:]:
        if s > ce:
            total, cs, ce = total + ce - cs, s, e
        else:
            ce = max(ce, e)
    return total + ce - cs


def check_nsys(path: str) -> None:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    tables = {r[0] for r in con.execute("select name from sqlite_master where type = 'table'")}
    meta = dict(con.execute("select name, value from META_DATA_EXPORT")) if "META_DATA_EXPORT" in tables else {}
    version = (f"{meta['EXPORT_PRODUCT_VERSION']}, schema {meta['EXPORT_SCHEMA_VERSION']}" if meta
               else "no META_DATA_EXPORT (pre-2021 layout)")
    doc, err = report(path)
    print(f"== {path} [{version}]")
    if doc is None:
        print(f"   gpusleuth: {err[-300:]}")
        return
    kernels = "CUPTI_ACTIVITY_KIND_KERNEL"
    for (dev,) in con.execute(f"select distinct deviceId from {kernels} order by 1"):
        n_k, ns_k = con.execute(f"select count(*), sum(end - start) from {kernels} where deviceId = ?", (dev,)).fetchone()
        copies: dict[str, list[int]] = {}
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
            for kind, src, dst, n, ns in con.execute(
                    "select copyKind, srcKind, dstKind, count(*), sum(end - start) from CUPTI_ACTIVITY_KIND_MEMCPY "
                    "where deviceId = ? group by 1, 2, 3", (dev,)):
                host = src if kind == 1 else dst if kind == 2 else None
                key = COPY_DIR.get(kind, f"kind{kind}") + (f"_{HOST_MEM[host]}" if host in HOST_MEM else "")
                acc = copies.setdefault(key, [0, 0])
                acc[0] += n
                acc[1] += ns
        n_set = (con.execute("select count(*) from CUPTI_ACTIVITY_KIND_MEMSET where deviceId = ?", (dev,)).fetchone()[0]
                 if "CUPTI_ACTIVITY_KIND_MEMSET" in tables else 0)
        spans: list[tuple[int, int]] = []
        for t in (kernels, "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if t in tables:
                spans += con.execute(f"select start, end from {t} where deviceId = ?", (dev,)).fetchall()
        busy = busy_union(spans)
        ops = n_k + sum(v[0] for v in copies.values()) + n_set
        rank = doc["ranks"][0] if len(doc["ranks"]) == 1 else next(
            r for r in doc["ranks"] if r["label"].endswith(f"gpu{dev}") or r["rank"] == dev)
        got_k, got_kt = rank["kernels"]["kernels"], rank["kernels"]["kernel_time_s"] * 1e9
        got_busy, got_ops = rank["device_time"]["busy_s"] * 1e9, rank["launch"]["device_ops_launched"]
        ok = got_k == n_k and abs(got_kt - ns_k) < 1e3 and abs(got_busy - busy) < 1e3 and got_ops == ops
        span = {k: round(v * 1e3, 2) for k, v in rank["span_partition"].items() if k.startswith("memcpy")}
        print(f"   device {dev} ({rank['device']}): kernels {n_k} | {got_k}, kernel ms {ns_k / 1e6:.3f} | {got_kt / 1e6:.3f}, "
              f"busy ms {busy / 1e6:.3f} | {got_busy / 1e6:.3f}, device ops {ops} | {got_ops} "
              f"-> {'MATCH' if ok else 'DIFF'}")
        print(f"     copies (SQL): {', '.join(f'{k} {v[0]}x {v[1] / 1e6:.2f} ms' for k, v in copies.items()) or 'none'}"
              f"; report span partition: {span or 'none'}")
    for f in doc["findings"]:
        print(f"   finding: {f['severity']} — {f['title']}")


def number(col: pd.Series) -> pd.Series:
    return pd.to_numeric(col.astype(str).str.extract(r"([-0-9.]+)")[0], errors="coerce")


def check_nvsmi(path: str) -> None:
    raw = open(path, "rb").read()
    nul = len(raw) - len(raw.rstrip(b"\0"))
    lines = raw.rstrip(b"\0").decode("utf-8", "replace").splitlines()
    header = next(ln for ln in lines if ln.startswith(("timestamp", "index")))
    rows = [ln for ln in lines if re.match(r"^\d{4}/\d\d/\d\d |^\d+, ", ln)]
    df = pd.read_csv(io.StringIO("\n".join([header] + rows)), skipinitialspace=True)
    doc, err = report(path)
    print(f"== {path}: {len(df):,} sample rows" + (f", {nul:,} trailing NUL bytes" if nul else ""))
    if doc is None:
        print(f"   gpusleuth: {err[-300:]}")
        return
    n_gpus = len(doc["gpu"])
    df["gpu"] = number(df["index"]).astype(int) if "index" in df else df.index % n_gpus
    for col in ("utilization.gpu [%]", "memory.used [MiB]", "power.draw [W]"):
        df[col] = number(df[col]) if col in df else float("nan")
    mine = df.groupby("gpu").agg(n=("gpu", "size"), util=("utilization.gpu [%]", "mean"),
                                 mem=("memory.used [MiB]", "max"), power=("power.draw [W]", "mean"))

    def same(a: float, b: float, tol: float) -> bool:
        return (a != a and b != b) or abs(a - b) < tol

    for g in doc["gpu"]:
        m = mine.loc[g["index"]]
        util = (g["util_gpu"] or {}).get("mean", float("nan"))
        mem = (g["mem_used_max_bytes"] or float("nan")) / 2**20
        power = (g["power_w"] or {}).get("mean", float("nan"))
        ok = g["samples"] == m.n and same(util, m.util, 0.01) and same(mem, m.mem, 0.5) and same(power, m.power, 0.01)
        print(f"   GPU {g['index']}: samples {int(m.n)} | {g['samples']}, util mean {m.util:.2f} | {util:.2f}, "
              f"peak MiB {m.mem:.0f} | {mem:.0f}, power mean {m.power:.2f} | {power:.2f} -> {'MATCH' if ok else 'DIFF'}")
    for f in doc["findings"]:
        print(f"   finding: {f['severity']} — {f['title']}")
    for loss in doc["losses"]:
        print(f"   loss: {loss}")


def main() -> None:
    for path in sys.argv[1:]:
        with open(path, "rb") as fh:
            head = fh.read(16)
        (check_nsys if head.startswith(b"SQLite format 3") else check_nvsmi)(path)


if __name__ == "__main__":
    main()
