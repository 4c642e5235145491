"""Trace load + analysis: gpusleuth vs HTA 0.5.0 vs a bare msgspec decode, side by side.

Each measurement runs in its own fresh child process; wall time is measured around the child and peak
RSS comes from ``os.wait4`` (that child's own ``ru_maxrss``). Tools are interleaved within each
repetition (ours, HTA, floor, ours, HTA, floor, …) so background load hits all of them alike; the
table reports medians and ratios.

    # once: HTA in a throwaway venv outside the repo
    python -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install HolisticTraceAnalysis==0.5.0
    # then
    python benchmarks/trace_load.py --reps 3 --big-reps 3

"ours" = ``load_traces`` + ``analyze_trace(...).to_dict()`` (every analysis in the report).
"HTA" = ``TraceAnalysis`` load + temporal breakdown + idle-time breakdown + kernel breakdown + comm/comp
overlap + CUDA launch stats (the analyses ours covers; ``visualize=False``).
"msgspec floor" = read + gunzip + ``msgspec.json.decode`` of the whole file to Python objects, nothing else
(as a user would call it, GC on; and again with the GC disabled, the fastest untyped decode there is).
The big trace (~400 MB of JSON) is built under /tmp by replicating the steps of a real trace with shifted
timestamps and ids; it is never committed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TRACES = HERE.parent / "tests" / "fixtures" / "hta"  # HTA's real traces (MIT), copied into the repo
REAL = ["negative_queue_length_values_check/rank0.json.gz", "df_index_resolver/df_index_resolver.json.gz",
        "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "nccl_parser_config/nccl_data.json.gz",
        "trace_diff/control/control.json.gz", "trace_diff/test/test.json.gz"]

OURS = """
import sys, time, json
t = time.perf_counter()
from gpusleuth.sources.kineto import load_traces
from gpusleuth.analysis.trace import analyze_trace
t0 = time.perf_counter()
runs = load_traces([sys.argv[1]])
t1 = time.perf_counter()
out = [analyze_trace(r).to_dict() for r in runs]
t2 = time.perf_counter()
json.dumps(out)
print(json.dumps({"import": t0 - t, "load": t1 - t0, "analyze": t2 - t1, "idle": out[0]["idle"]}))
"""

HTA = """
import sys, time, json, os, logging, warnings
warnings.filterwarnings("ignore"); logging.disable(logging.CRITICAL)
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
p = sys.argv[1]
ta = TraceAnalysis(trace_files={0: p}, trace_dir=os.path.dirname(p), include_last_profiler_step=True)
t1 = time.perf_counter()
errors = []
res = {}
for name, call in [("temporal", lambda: ta.get_temporal_breakdown(visualize=False)),
                   ("idle", lambda: ta.get_idle_time_breakdown(visualize=False)),
                   ("kernels", lambda: ta.get_gpu_kernel_breakdown(visualize=False)),
                   ("overlap", lambda: ta.get_comm_comp_overlap(visualize=False)),
                   ("launch", lambda: ta.get_cuda_kernel_launch_stats(visualize=False))]:
    try:
        res[name] = call()
    except Exception as e:
        errors.append(f"{name}: {type(e).__name__}")
t2 = time.perf_counter()
idle = float(res["temporal"]["idle_time_pctg"].iloc[0]) / 100 if "temporal" in res else None
print(json.dumps({"import": t0 - t, "load": t1 - t0, "analyze": t2 - t1, "idle": idle, "errors": errors}))
"""

FLOOR = """
import sys, time, json, gzip
t = time.perf_counter()
import msgspec
t0 = time.perf_counter()
raw = open(sys.argv[1], "rb").read()
data = gzip.decompress(raw) if raw[:2] == b"\\x1f\\x8b" else raw
del raw
doc = msgspec.json.decode(data)
t1 = time.perf_counter()
print(json.dumps({"import": t0 - t, "load": t1 - t0, "analyze": 0.0, "events": len(doc["traceEvents"])}))
"""

FLOOR_NOGC = FLOOR.replace("import msgspec", "import msgspec, gc; gc.disable()")


def run_child_wait4(python: str, code: str, path: Path, timeout: float = 900) -> dict:
    """One fresh process: wall seconds (parent-side, including interpreter start and imports), peak RSS
    in MiB of this child alone (reaped with ``os.wait4``), and the child's own timing report."""
    t = time.perf_counter()
    p = subprocess.Popen([python, "-c", code, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = p.stdout.read()
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t
    try:
        info = json.loads(out.decode().strip().splitlines()[-1])
    except (IndexError, ValueError):
        info = {"error": err.decode(errors="replace")[-300:]}
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024, **info}


def _replicated(src: Path, target_mb: int):
    """The header of ``src`` and a generator of its events replicated until the JSON text is about
    ``target_mb``: each copy shifts timestamps past the previous copy's end, and correlation/External ids and
    ProfilerStep numbers past the previous copy's largest, so the result is one long, consistent trace."""
    import msgspec

    text = gzip.decompress(src.read_bytes())
    doc = msgspec.json.decode(text)
    events = doc.pop("traceEvents")
    enc = msgspec.json.Encoder()
    per_copy = sum(len(enc.encode(e)) + 2 for e in events)  # compact encoding is smaller than Kineto's
    copies = max(1, round(target_mb * 1e6 / per_copy))
    ts = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))]
    t0, t1 = min(ts), max(ts)
    shift_t = (t1 - t0) + 1000
    ids = [e.get("args", {}).get(k, 0) for e in events for k in ("correlation", "External id")]
    ids += [e.get("id", 0) for e in events]
    shift_id = max(i for i in ids if isinstance(i, int)) + 1
    steps = [int(e["name"].split("#")[1]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    shift_step = (max(steps) - min(steps) + 1) if steps else 0

    def gen():
        for c in range(copies):
            for e in events:
                if e.get("ph") == "M" and c > 0:
                    continue
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = e2["ts"] + c * shift_t
                if "id" in e2 and isinstance(e2["id"], int):
                    e2["id"] += c * shift_id
                a = e2.get("args")
                if isinstance(a, dict):
                    a = dict(a)
                    for k in ("correlation", "External id"):
                        if isinstance(a.get(k), int):
                            a[k] += c * shift_id
                    e2["args"] = a
                name = e2.get("name")
                if isinstance(name, str) and name.startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{int(name.split('#')[1]) + c * shift_step}"
                yield e2
    return doc, gen()


def build_big(src: Path, dst: Path, target_mb: int) -> Path:
    """One event per line, gzip (Kineto's own layout, compact events)."""
    if dst.exists() and dst.stat().st_size > 0:
        return dst
    import msgspec

    enc = msgspec.json.Encoder()
    head, events = _replicated(src, target_mb)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    with gzip.open(tmp, "wb", compresslevel=1) as f:
        f.write(b'{\n  "schemaVersion": 1,\n  "deviceProperties": ' + enc.encode(head.get("deviceProperties", []))
                + b',\n  "distributedInfo": ' + enc.encode(head.get("distributedInfo")) + b',\n  "traceEvents": [\n')
        f.write(b",\n".join(enc.encode(e) for e in events))
        f.write(b'\n  ],\n  "traceName": "replicated"\n}\n')
    tmp.rename(dst)
    return dst


LAYOUTS = {
    # json.dump(obj, f): the whole trace on one line, as many tools and scripts write it
    "compact": dict(sep=", ", dumps=lambda e: json.dumps(e)),
    # json.dump(obj, f, indent=2): the pretty layout (one key per line)
    "pretty": dict(sep=",\n", dumps=lambda e: "    " + json.dumps(e, indent=2).replace("\n", "\n    ")),
}


def build_layout(src: Path, dst: Path, target_mb: int, layout: str) -> Path:
    """The same replicated events as plain (uncompressed) JSON in ``layout``; written once under /tmp."""
    if dst.exists() and dst.stat().st_size > 0:
        return dst
    head, events = _replicated(src, target_mb)
    lay = LAYOUTS[layout]
    meta = {"schemaVersion": 1, "deviceProperties": head.get("deviceProperties", []),
            "distributedInfo": head.get("distributedInfo")}
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(meta, indent=2 if layout == "pretty" else None)[:-1] + ', "traceEvents": [')
        first = True
        for e in events:
            f.write(("" if first else lay["sep"]) + lay["dumps"](e))
            first = False
        f.write('], "traceName": "replicated"}\n')
    tmp.rename(dst)
    return dst


REPORT = """
import sys, time, json, io, contextlib
t = time.perf_counter()
from gpusleuth.cli.main import main
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    rc = main(["report", sys.argv[1], "--json"])
t1 = time.perf_counter()
rep = json.loads(buf.getvalue())
print(json.dumps({"load": t1 - t, "analyze": 0.0, "rc": rc, "idle": rep["ranks"][0]["idle"]}))
"""


def layouts(sizes: list[int], reps: int, hta_python: str | None, src: Path, tmp: Path) -> str:
    """End to end (``gpusleuth report F --json``, in a fresh process) on the same events in each layout at
    each size, against HTA and a bare msgspec decode; shows time and peak memory grow linearly."""
    rows = ["| layout | JSON MB | gpusleuth report --json: wall s / CPU s | peak RSS MiB | CPU s per 100 MB | "
            "msgspec decode: wall s / CPU s / MiB | ours ÷ msgspec (CPU) | HTA: wall s / CPU s / MiB | "
            "HTA ÷ ours (CPU) | HTA ÷ ours (wall) | ours ÷ HTA (RSS) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    tools = [("ours", sys.executable, REPORT), ("floor", sys.executable, FLOOR)]
    if hta_python:
        tools.append(("hta", hta_python, HTA))
    for mb in sizes:
        for layout in LAYOUTS:
            f = build_layout(src, tmp / f"replicated-{mb}mb-{layout}.json", mb, layout)
            res: dict[str, list[dict]] = {name: [] for name, _, _ in tools}
            for r in range(reps):
                for name, py, code in tools:
                    if name == "hta" and r > 0 and mb > 150:
                        continue  # HTA at this size: one run is minutes of a shared machine
                    res[name].append(run_child_wait4(py, code, f))
                    last = res[name][-1]
                    print(f"  {f.name} rep {r + 1} {name}: {last['wall']:.2f}s wall {last['cpu']:.2f}s CPU "
                          f"{last['rss_mb']:.0f}MiB" + (f" ERROR {last['error']}" if "error" in last else ""),
                          file=sys.stderr, flush=True)
            m = {name: {k: median([x[k] for x in v]) for k in ("wall", "cpu", "rss_mb")} for name, v in res.items()}
            size = f.stat().st_size / 1e6
            o, fl, h = m["ours"], m["floor"], m.get("hta")

            def r(a, b):
                return "—" if a is None or b is None else f"{a / b:.2f}"
            hta_cells = (f"{h['wall']:.1f} / {h['cpu']:.1f} / {h['rss_mb']:.0f} | **{r(h['cpu'], o['cpu'])}×** | "
                         f"{r(h['wall'], o['wall'])}× | **{r(o['rss_mb'], h['rss_mb'])}** |") if h else "— | — | — | — |"
            rows.append(f"| {layout} | {size:.0f} | {o['wall']:.2f} / {o['cpu']:.2f} | {o['rss_mb']:.0f} | "
                        f"{o['cpu'] / size * 100:.2f} | {fl['wall']:.2f} / {fl['cpu']:.2f} / {fl['rss_mb']:.0f} | "
                        f"{r(o['cpu'], fl['cpu'])}× | {hta_cells}")
    return "\n".join(rows)


def end_to_end(path: Path, reps: int, hta_python: str | None) -> str:
    """The user's command itself — ``python -m gpusleuth report FILE --json`` in a fresh process — against
    HTA 0.5.0 load + the five analyses, interleaved (ours, HTA, ours, HTA, …); medians of wall, CPU, RSS."""
    res: dict[str, list[dict]] = {"ours": [], "hta": []}
    for r in range(reps):
        t = time.perf_counter()
        with tempfile.TemporaryFile() as out:
            p = subprocess.Popen([sys.executable, "-m", "gpusleuth", "report", str(path), "--json"],
                                 stdout=out, stderr=subprocess.DEVNULL)
            _, status, ru = os.wait4(p.pid, 0)
            wall = time.perf_counter() - t
            out.seek(0)
            rep = json.loads(out.read())
        res["ours"].append({"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024,
                            "idle": rep["ranks"][0]["idle"]})
        if hta_python:
            res["hta"].append(run_child_wait4(hta_python, HTA, path))
        for name in res:
            if res[name]:
                x = res[name][-1]
                print(f"  rep {r + 1} {name}: {x['wall']:.2f}s wall {x['cpu']:.2f}s CPU {x['rss_mb']:.0f}MiB "
                      f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
    m = {n: {k: median([x[k] for x in v]) for k in ("wall", "cpu", "rss_mb")} for n, v in res.items() if v}
    o, h = m["ours"], m.get("hta")
    rows = [f"{path.name}: {path.stat().st_size / 1e6:.0f} MB, {reps} interleaved repetitions, medians",
            "| tool | wall s | CPU s | peak RSS MiB |", "|---|---:|---:|---:|",
            f"| `gpusleuth report F --json` | {o['wall']:.2f} | {o['cpu']:.2f} | {o['rss_mb']:.0f} |"]
    if h:
        rows += [f"| HTA 0.5.0 (load + 5 analyses) | {h['wall']:.2f} | {h['cpu']:.2f} | {h['rss_mb']:.0f} |",
                 f"| HTA ÷ ours (time), ours ÷ HTA (RSS) | **{h['wall'] / o['wall']:.1f}×** | "
                 f"{h['cpu'] / o['cpu']:.1f}× | **{o['rss_mb'] / h['rss_mb']:.2f}** |",
                 f"\nidle share: ours {res['ours'][0]['idle']}, HTA {res['hta'][0].get('idle')}"]
    return "\n".join(rows)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def bench(files: list[Path], reps: int, hta_python: str | None) -> list[dict]:
    tools = [("ours", sys.executable, OURS), ("floor", sys.executable, FLOOR),
             ("floor_nogc", sys.executable, FLOOR_NOGC)]
    if hta_python:
        tools.insert(1, ("hta", hta_python, HTA))
    rows = []
    for f in files:
        res: dict[str, list[dict]] = {name: [] for name, _, _ in tools}
        for r in range(reps):
            for name, py, code in tools:
                res[name].append(run_child_wait4(py, code, f))
                last = res[name][-1]
                print(f"  {f.name} rep {r + 1} {name}: {last['wall']:.2f}s {last['rss_mb']:.0f}MiB"
                      + (f" ERROR {last['error']}" if "error" in last else ""), file=sys.stderr, flush=True)
        row = {"file": f, "json_mb": None}
        for name, _, _ in tools:
            row[name] = {k: median([x.get(k) for x in res[name]]) for k in ("wall", "rss_mb", "load", "analyze", "import")}
            row[name]["errors"] = sorted({e for x in res[name] for e in x.get("errors", [])})
        rows.append(row)
    return rows


def table(rows: list[dict], have_hta: bool) -> str:
    def f(x, spec=".2f"):
        return "—" if x is None else format(x, spec)

    def ratio(a, b):
        return None if (a is None or b is None or b == 0) else a / b

    out = ["| trace | JSON MB | ours s: load + analyses | HTA s: load + analyses | HTA ÷ ours | msgspec floor s | "
           "ours ÷ floor | floor, GC off s | ours ÷ that | ours peak RSS MiB | HTA peak RSS MiB | ours ÷ HTA RSS | process wall s: ours / HTA |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        o, h, fl, fn = r["ours"], r.get("hta", {}), r["floor"], r["floor_nogc"]
        o_t = (o["load"] or 0) + (o["analyze"] or 0)
        h_t = None if not h or h.get("load") is None else h["load"] + (h["analyze"] or 0)
        out.append(
            f"| {r['file'].name} | {f(r['json_mb'], '.0f')} | {f(o['load'])} + {f(o['analyze'])} = **{f(o_t)}** | "
            f"{f(h.get('load'))} + {f(h.get('analyze'))} = **{f(h_t)}** | **{f(ratio(h_t, o_t), '.1f')}×** | "
            f"{f(fl['load'])} | {f(ratio(o_t, fl['load']), '.2f')}× | {f(fn['load'])} | "
            f"{f(ratio(o_t, fn['load']), '.2f')}× | {f(o['rss_mb'], '.0f')} | "
            f"{f(h.get('rss_mb'), '.0f')} | {f(ratio(o['rss_mb'], h.get('rss_mb')), '.2f')} | "
            f"{f(o['wall'])} / {f(h.get('wall'))} |")
    return "\n".join(out)


DECODE = """
import sys, time, json, gzip, gc
which, nogc = sys.argv[2], sys.argv[3] == "1"
raw = open(sys.argv[1], "rb").read()
data = gzip.decompress(raw) if raw[:2] == b"\\x1f\\x8b" else raw
del raw
if which == "json":
    import json as mod; dec = mod.loads
elif which == "orjson":
    import orjson; dec = orjson.loads
elif which == "msgspec":
    import msgspec; dec = msgspec.json.decode
elif which == "msgspec-typed":
    import msgspec
    from gpusleuth.sources.kineto.schema import FastTail
    d = msgspec.json.Decoder(FastTail); dec = d.decode
elif which == "gpusleuth-load":
    from gpusleuth.sources.kineto import load_trace
    dec = None
if nogc:
    gc.disable()
t = time.perf_counter()
out = dec(data) if dec else load_trace(sys.argv[1])
print(json.dumps({"load": time.perf_counter() - t}))
"""


def decoders(files: list[Path], reps: int) -> str:
    """Decoder comparison on already-decompressed text (decompression excluded), each in a fresh process."""
    import tempfile

    rows = ["| trace | JSON MB | json | json, GC off | orjson | orjson, GC off | msgspec → dicts | "
            "msgspec → dicts, GC off | msgspec typed Struct, GC off | gpusleuth load (gunzip+columns) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    variants = [("json", "0"), ("json", "1"), ("orjson", "0"), ("orjson", "1"), ("msgspec", "0"),
                ("msgspec", "1"), ("msgspec-typed", "1"), ("gpusleuth-load", "1")]
    for f in files:
        with tempfile.TemporaryDirectory() as td:
            plain = Path(td) / f.name.replace(".gz", "")
            plain.write_bytes(gzip.decompress(f.read_bytes()))
            res = {v: [] for v in variants}
            for _ in range(reps):
                for which, nogc in variants:
                    code = DECODE.replace("sys.argv[2]", repr(which)).replace("sys.argv[3]", repr(nogc))
                    src = f if which == "gpusleuth-load" else plain
                    r = run_child_wait4(sys.executable, code, src)
                    res[(which, nogc)].append((r.get("load"), r["rss_mb"]))
            mb = plain.stat().st_size / 1e6
        cells = []
        for v in variants:
            t = median([x[0] for x in res[v]])
            m = median([x[1] for x in res[v]])
            cells.append("—" if t is None else f"{t:.2f} s / {m:.0f} MiB")
        rows.append(f"| {f.name} | {mb:.0f} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


PHASES = """
import time, sys, io, json, contextlib, os
def kids():
    t = os.times()
    return t.children_user + t.children_system
marks = [(time.perf_counter(), time.process_time(), kids(), "start")]
def mark(n):
    marks.append((time.perf_counter(), time.process_time(), kids(), n))
import gpusleuth.sources.kineto as K
import gpusleuth.sources.kineto.columns as C
from gpusleuth.cli.main import main
load, finish = K.load_trace, C.ColumnBuilder.finish
def timed_load(*a, **k):
    mark("imports"); r = load(*a, **k); mark("columns: sort, tables"); return r
def timed_finish(self, *a):
    mark("read: inflate, decode, columns"); return finish(self, *a)
K.load_trace, C.ColumnBuilder.finish = timed_load, timed_finish
with contextlib.redirect_stdout(io.StringIO()):
    main(["report", sys.argv[1], "--json"])
mark("analysis, diagnosis, JSON")
print(json.dumps([[n, w1 - w0, c1 - c0, k1 - k0] for (w0, c0, k0, _), (w1, c1, k1, n) in zip(marks, marks[1:])]))
"""


def phases(path: Path, reps: int) -> str:
    """Where ``gpusleuth report F --json`` spends its time, in-process (wall and CPU of this process, the
    decompressing thread's CPU included; the CPU of the child that reads a big trace's second part, which
    runs beside this process), medians of ``reps`` fresh processes."""
    runs = []
    for _ in range(reps):
        out = subprocess.run([sys.executable, "-c", PHASES, str(path)], capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    rows = [f"{path.name}, {reps} runs, medians; load {os.getloadavg()[0]:.1f}",
            "| phase | wall s | CPU s | the reading child's CPU s |", "|---|---:|---:|---:|"]
    for i, (name, *_) in enumerate(runs[0]):
        rows.append(f"| {name} | {median([r[i][1] for r in runs]):.2f} | {median([r[i][2] for r in runs]):.2f} | "
                    f"{median([r[i][3] for r in runs]):.2f} |")
    return "\n".join(rows)


def build_gz(src: Path, tmp: Path, mb: int, layout: str) -> Path:
    """``build_layout``'s trace, gzip-compressed (level 6, as ``gzip`` writes it), under ``tmp``; written once."""
    dst = tmp / f"floor-{mb}mb-{layout}.json.gz"
    if dst.exists() and dst.stat().st_size > 0:
        return dst
    plain = build_layout(src, tmp / f"floor-{mb}mb-{layout}.json", mb, layout)
    tmp_gz = dst.with_name(dst.name + ".tmp")
    with open(plain, "rb") as f, gzip.open(tmp_gz, "wb", compresslevel=6) as g:
        while block := f.read(1 << 22):
            g.write(block)
    tmp_gz.rename(dst)
    plain.unlink()
    return dst


def against_floor(files: list[Path], reps: int, hta_python: str | None, hta_reps: int,
                  against: Path | None = None) -> str:
    """Each file: ``gpusleuth report F --json`` (the user's whole command: interpreter, imports, load, every
    analysis, diagnosis, JSON), the decompression floor ``gzip -dc F > /dev/null``, a generic ``msgspec``
    decode of the same file (read + gunzip + ``msgspec.json.decode`` to Python objects) and HTA 0.5.0 (load +
    the five analyses), interleaved within each repetition; medians; MB/s of JSON and × the gunzip floor.
    ``against``: another gpusleuth source tree (its ``src``), run the same way as "before"."""
    rows = ["| trace | JSON MB | gz MB | gunzip floor s | gpusleuth report --json: wall s / CPU s / MiB | MB/s | "
            "× floor | before: wall s / CPU s / MiB | × floor | msgspec decode: wall s / CPU s / MiB | × floor | "
            "HTA: wall s / CPU s / MiB | × floor |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    loads = [os.getloadavg()[0]]
    for f in files:
        with gzip.open(f, "rb") as g:
            json_mb = sum(len(b) for b in iter(lambda: g.read(1 << 24), b"")) / 1e6
        res: dict[str, list[dict]] = {"gunzip": [], "ours": [], "before": [], "msgspec": [], "hta": []}
        for r in range(reps):
            for name, src in [("ours", None)] + ([("before", against)] if against else []):
                env = dict(os.environ, PYTHONPATH=str(src)) if src else None
                with tempfile.TemporaryFile() as out:
                    t = time.perf_counter()
                    p = subprocess.Popen([sys.executable, "-m", "gpusleuth", "report", str(f), "--json"],
                                         stdout=out, stderr=subprocess.DEVNULL, env=env)
                    _, _, ru = os.wait4(p.pid, 0)
                    res[name].append({"wall": time.perf_counter() - t, "cpu": ru.ru_utime + ru.ru_stime,
                                      "rss_mb": ru.ru_maxrss / 1024})
            t = time.perf_counter()
            with open(f, "rb") as src, open(os.devnull, "wb") as null:
                p = subprocess.Popen(["gzip", "-dc"], stdin=src, stdout=null)
                _, _, ru = os.wait4(p.pid, 0)
            res["gunzip"].append({"wall": time.perf_counter() - t, "cpu": ru.ru_utime + ru.ru_stime,
                                  "rss_mb": ru.ru_maxrss / 1024})
            res["msgspec"].append(run_child_wait4(sys.executable, FLOOR, f))
            if hta_python and r < hta_reps:
                res["hta"].append(run_child_wait4(hta_python, HTA, f, timeout=3600))
            loads.append(os.getloadavg()[0])
            print(f"  {f.name} rep {r + 1}: " + ", ".join(f"{k} {v[-1]['wall']:.2f}s" for k, v in res.items() if v)
                  + f" (load {loads[-1]:.1f})", file=sys.stderr, flush=True)
        m = {k: {q: median([x[q] for x in v]) for q in ("wall", "cpu", "rss_mb")} for k, v in res.items() if v}
        fl = m["gunzip"]["wall"]

        def cell(k: str) -> str:
            if k not in m:
                return "— | —"
            x = m[k]
            return f"{x['wall']:.2f} / {x['cpu']:.2f} / {x['rss_mb']:.0f} | {x['wall'] / fl:.2f}×"
        o = m["ours"]
        rows.append(f"| {f.name} | {json_mb:.0f} | {f.stat().st_size / 1e6:.1f} | {fl:.2f} | {o['wall']:.2f} / "
                    f"{o['cpu']:.2f} / {o['rss_mb']:.0f} | {json_mb / o['wall']:.0f} | **{o['wall'] / fl:.2f}×** | "
                    f"{cell('before')} | {cell('msgspec')} | {cell('hta')} |")
    rows.append(f"\n{reps} interleaved repetitions (HTA: {hta_reps if hta_python else 0}), medians; {os.cpu_count()} "
                f"CPUs; 1-min load average {min(loads):.1f}–{max(loads):.1f} during the run.")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3, help="repetitions per real trace")
    ap.add_argument("--big-reps", type=int, default=3, help="repetitions on the ~400 MB trace")
    ap.add_argument("--big-mb", type=int, default=400)
    ap.add_argument("--big-source", default="df_index_resolver/df_index_resolver.json.gz")
    ap.add_argument("--big-path", default="/tmp/gpusleuth-bench/replicated-400mb.json.gz")
    ap.add_argument("--hta-python", default="/tmp/htavenv/bin/python", help="'none': leave HTA out")
    ap.add_argument("--no-big", action="store_true")
    ap.add_argument("--only", nargs="*", help="subset of real traces (relative paths)")
    ap.add_argument("--decoders", action="store_true",
                    help="instead: compare json / orjson / msgspec / typed msgspec decode times")
    ap.add_argument("--layouts", nargs="*", type=int, metavar="MB",
                    help="instead: end-to-end report time and memory on the same events written compact "
                    "(one line) and pretty-printed, at these sizes in MB (e.g. 30 100 330)")
    ap.add_argument("--tmp", type=Path, default=Path("/tmp/gpusleuth-bench"))
    ap.add_argument("--end-to-end", type=Path, metavar="FILE",
                    help="instead: `python -m gpusleuth report FILE --json` against HTA on FILE, --reps "
                    "interleaved repetitions (wall, CPU and peak RSS medians)")
    ap.add_argument("--floor", nargs="*", metavar="MB:LAYOUT",
                    help="instead: the whole `gpusleuth report F --json` against `gzip -dc F` (the decompression "
                    "floor), a generic msgspec decode and HTA, on gzip traces built at these sizes and layouts "
                    "(e.g. 202:pretty 277:compact; sizes as --layouts), or on --floor-files")
    ap.add_argument("--floor-files", nargs="*", type=Path, default=[], metavar="FILE")
    ap.add_argument("--against", type=Path, metavar="SRC",
                    help="with --floor: also run the report from this source tree (another checkout's src/)")
    ap.add_argument("--hta-reps", type=int, default=1, help="HTA repetitions per trace with --floor (minutes each)")
    ap.add_argument("--phases", type=Path, metavar="FILE", help="instead: where the report's time goes on FILE")
    args = ap.parse_args()
    if args.phases:
        print(phases(args.phases, args.reps))
        return
    if args.floor is not None or args.floor_files:
        hta = args.hta_python if Path(args.hta_python).exists() else None
        files = list(args.floor_files)
        for spec in args.floor or []:
            mb, layout = spec.split(":")
            files.append(build_gz(TRACES / args.big_source, args.tmp, int(mb), layout))
        print(against_floor(files, args.reps, hta, args.hta_reps, args.against))
        return
    if args.end_to_end:
        hta = args.hta_python if Path(args.hta_python).exists() else None
        print(end_to_end(args.end_to_end, args.reps, hta))
        return
    if args.layouts:
        hta = args.hta_python if Path(args.hta_python).exists() else None
        print(layouts(args.layouts, args.reps, hta, TRACES / args.big_source, args.tmp))
        return
    if args.decoders:
        files = [TRACES / r for r in (args.only or REAL)]
        if not args.no_big:
            files.append(build_big(TRACES / args.big_source, Path(args.big_path), args.big_mb))
        print(decoders(files, args.reps))
        return
    hta = args.hta_python if Path(args.hta_python).exists() else None
    if not hta:
        print(f"HTA python {args.hta_python} not found: measuring ours and the floor only. Create it with\n"
              "  python -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install HolisticTraceAnalysis==0.5.0",
              file=sys.stderr)
    files = [TRACES / r for r in (args.only or REAL)]
    load_before = os.getloadavg()
    rows = bench(files, args.reps, hta)
    if not args.no_big:
        big = Path(args.big_path)
        big.parent.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        build_big(TRACES / args.big_source, big, args.big_mb)
        print(f"big trace {big} ({big.stat().st_size / 2**20:.0f} MB gz) ready in {time.perf_counter() - t:.1f}s",
              file=sys.stderr)
        rows += bench([big], args.big_reps, hta)
    for r in rows:
        with gzip.open(r["file"], "rb") as g:
            n = 0
            while chunk := g.read(1 << 24):
                n += len(chunk)
        r["json_mb"] = n / 1e6
    print(table(rows, bool(hta)))
    print(f"\n{os.cpu_count()} CPUs; 1-min load average {load_before[0]:.1f} at start, "
          f"{os.getloadavg()[0]:.1f} at end (other jobs on the machine inflate absolute times; "
          "interleaving keeps the ratios comparable).")
    errs = {e for r in rows for e in r.get("hta", {}).get("errors", [])}
    if errs:
        print(f"\nHTA analyses that raised (their time is still counted up to the error): {', '.join(sorted(errs))}")


if __name__ == "__main__":
    main()
