"""Write a Run read from another tool (``gpusleuth import``) as a run directory (docs/run-format.md).

The telemetry tables go to Parquet with the recorder's schemas, so DuckDB/pandas queries and
``compare`` see no difference from a recording; a trace Run's events go to ``trace/rank-N.json.gz`` as a
Chrome/Kineto trace (the categories, correlation ids, streams and devices the trace analysis reads),
which ``load_run`` attaches as the run's profiles.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow.parquet as pq

from gpusleuth.run.layout import RunDir
from gpusleuth.run.model import Run
from gpusleuth.sources.gpu_samples import gpu_arrow_table

_CHUNK = 200_000


def write_run_dir(run: Run, out: Path) -> list[str]:
    """Write ``run`` (a GPU log, or a job whose ``profiles`` are trace ranks) into ``out``; returns the
    files written. Losses go into ``meta.json`` so every later report states them."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    meta = dict(run.meta)
    meta["losses"] = list(run.losses) + [f"{r.label}: {m}" for r in run.profiles for m in r.losses]
    meta.setdefault("label", run.label)
    if len(run.gpu):
        pq.write_table(gpu_arrow_table(run.gpu), RunDir(out).table("gpu"), compression="zstd")
        written.append(RunDir(out).table("gpu").name)
    traces = [r for r in (run.profiles or ([run] if run.trace is not None else [])) if r.trace is not None]
    if traces:
        (out / "trace").mkdir(exist_ok=True)
        for i, r in enumerate(traces):
            name = f"trace/rank-{i}.json.gz"
            write_chrome_trace(r, out / name, rank=i, world=len(traces))
            written.append(name)
    RunDir(out).write_meta(meta)
    written.append(RunDir(out).meta_file.name)
    return written


def write_chrome_trace(run: Run, path: Path, rank: int, world: int) -> None:
    """The Run's TraceData as a Chrome trace (µs relative to ``baseTimeNanoseconds``), streamed in chunks."""
    t = run.trace
    if t is None:
        raise ValueError("write_chrome_trace: this Run holds no profiler trace")
    ev = t.events
    enc = msgspec.json.Encoder()
    names = [enc.encode(str(n)) for n in t.names]
    cats = [enc.encode(str(c)) for c in t.cats]
    base = int(t.origin_ns)
    props = t.meta.get("deviceProperties") or []
    head = {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": world},
            "deviceProperties": props, "displayTimeUnit": "ns", "baseTimeNanoseconds": base}
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wb", compresslevel=5) as f:
        f.write(enc.encode(head)[:-1] + b',"traceEvents":[\n')
        n = len(ev)
        for lo in range(0, n, _CHUNK):
            hi = min(n, lo + _CHUNK)
            ts = ev["ts"][lo:hi] / 1000.0
            dur = ev["dur"][lo:hi] / 1000.0
            rows = []
            for j in range(hi - lo):
                k = lo + j
                args = b'{"correlation":%d,"stream":%d,"device":%d}' % (ev["corr"][k], ev["stream"][k], ev["device"][k])
                rows.append(b'{"ph":"X","cat":%s,"name":%s,"pid":%d,"tid":%d,"ts":%r,"dur":%r,"args":%s}' % (
                    cats[ev["cat"][k]], names[ev["name"][k]], _id(t.pids, ev["pid"][k]), _id(t.tids, ev["tid"][k]),
                    float(ts[j]), float(dur[j]), args))
            f.write(b",\n".join(rows))
            if hi < n:
                f.write(b",\n")
        f.write(b"\n]}\n")
    tmp.replace(path)


def _id(table: list[Any], code: Any) -> int:
    v = table[int(code)] if 0 <= int(code) < len(table) else -1
    return int(v) if isinstance(v, (int, np.integer)) else abs(hash(v)) % 2**31
