"""Nsight Systems SQLite exports (``nsys export --type sqlite``) → one Run per rank, in the Kineto trace model.

Kernels, memcpy (named like Kineto's ``Memcpy HtoD (Pageable -> Device)``, unified-memory migrations
marked as such), memset, synchronization, CUDA runtime calls (version suffixes such as ``_v7000``
dropped so the launch/sync tables match) and NVTX ranges become rows of a
:class:`~gpusleuth.sources.kineto.model.TraceData`, so the trace attribution and every trace rule apply
unchanged. One rank = one process with GPU work (split further by device when one process drives
several). Steps: NVTX ranges named like steps (``step 12``, ``train_step``, ``iteration 3``, PyTorch's
``ProfilerStep#N``), or the range given with ``--step-range NAME``; each becomes ``ProfilerStep#k``.

Columns are read by name (``PRAGMA table_info``) across schema 2.x–3.2x: the metadata table's rename,
``SYNCHRONIZATION.syncType`` vs ``deprecatedSyncType``, NVTX ``text`` vs ``textId``, and tables created
only when something was recorded. ``GPU_METRICS`` samples, when captured, become the Run's ``gpu`` table.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any, Callable

import numpy as np

from gpusleuth.errors import InputError
from gpusleuth.run.meta import RunMeta
from gpusleuth.run.model import Run, Table
from gpusleuth.run.trace_data import TraceData
from gpusleuth.sources.kineto.model import KERNEL, MEMCPY, MEMSET, RUNTIME, SYNC, USER_ANN

COPY_KIND = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
             10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
UVM_KINDS = (11, 12, 13)
MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
            6: "Managed Static"}
SYNC_NAMES = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
STEP_LIKE = re.compile(r"^(ProfilerStep#\d+|(train(ing)?[ _-]?)?(step|iter(ation)?)([ _#:=-]*\d+)?)$", re.I)
_VERSION = re.compile(r"_v\d+$")
#: a capture with fewer device operations than this is a start-up or a toy, not a workload to diagnose
WINDOW_MIN_OPS = 200
FETCH_ROWS = 1 << 16  # rows per chunk read from SQLite


class _Db:
    def __init__(self, path: Path):
        self.path = path
        try:
            self.con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            self.tables = {r[0] for r in self.con.execute("select name from sqlite_master where type='table'")}
            self.losses: list[str] = []
        except sqlite3.DatabaseError as exc:
            raise InputError(path, f"a damaged SQLite file ({exc})") from None

    def cols(self, table: str) -> set[str]:
        if table not in self.tables:
            return set()
        try:
            return {r[1] for r in self.con.execute(f"PRAGMA table_info({table})")}
        except sqlite3.DatabaseError as exc:
            self.losses.append(f"{self.path.name}: table {table} is damaged ({exc}); skipped")
            return set()

    def _damaged(self, sql: str, exc: Exception, rows: int) -> None:
        m = re.search(r"\bfrom (\w+)", sql, re.I)
        table = m.group(1) if m else "a table"
        self.losses.append(f"{self.path.name}: {table} is damaged ({exc}): "
                           + (f"its first {rows:,} row(s) were read, the rest lost" if rows else "none of it was read"))

    def fetch(self, sql: str) -> list[np.ndarray]:
        """The query's columns as arrays (the first two — start and end — always integers: rows whose start
        or end is not one are dropped and counted; elsewhere a value that is not a number becomes −1), read
        in chunks: Python row tuples cost ~100 bytes a value, so a 100 MB export read whole held ~1 GB of
        them at once; chunk by chunk only the arrays stay. A damaged table keeps the rows read before the
        damage, and the loss is said."""
        parts: list[list[np.ndarray]] = []
        read = 0
        try:
            cur = self.con.execute(sql)
            while True:
                rows = cur.fetchmany(FETCH_ROWS)
                if not rows:
                    break
                parts.append([np.array(c) for c in zip(*rows)])
                read += len(rows)
        except sqlite3.DatabaseError as exc:
            self._damaged(sql, exc, read)
        if not parts:
            return []
        cols = [np.concatenate(c) if len(c) > 1 else c[0] for c in zip(*parts)]
        return self._numeric(sql, cols)

    def _numeric(self, sql: str, cols: list[np.ndarray]) -> list[np.ndarray]:
        out, ok = [], np.ones(len(cols[0]), bool)
        for i, c in enumerate(cols):
            v, good = _as_int64(c)
            if i < 2:
                ok &= good
            out.append(np.where(good, v, -1))
        if not ok.all():
            m = re.search(r"\bfrom (\w+)", sql, re.I)
            self.losses.append(f"{self.path.name}: {int((~ok).sum()):,} row(s) of {m.group(1) if m else 'a table'} "
                               "whose start or end is not a number were skipped")
            out = [c[ok] for c in out]
        return out if len(out[0]) else []

    def fetch_labelled(self, sql: str, strings: dict[int, str]) -> list[Any] | None:
        """Rows of (numeric columns…, text, text id) as the numeric arrays, the distinct labels, and each
        row's index into them — a label is the text, else the string its id names. The text never becomes
        a column: NVTX exports repeat a few names hundreds of thousands of times (a fixed-width text column
        of a 100 MB export took 200 MB, its unique() 800 MB more)."""
        index: dict[str, int] = {}
        parts: list[list[np.ndarray]] = []
        read = 0
        try:
            cur = self.con.execute(sql)
            while True:
                rows = cur.fetchmany(FETCH_ROWS)
                if not rows:
                    break
                cols = list(zip(*rows))
                labels = (str(t) if t else strings.get(i, "") if isinstance(i, int) else ""
                          for t, i in zip(cols[-2], cols[-1]))
                inv = np.fromiter((index.setdefault(x, len(index)) for x in labels), np.int64, len(rows))
                parts.append([np.array(c) for c in cols[:-2]] + [inv])
                read += len(rows)
        except sqlite3.DatabaseError as exc:
            self._damaged(sql, exc, read)
        if not parts:
            return None
        merged = self._numeric(sql, [np.concatenate(c) if len(c) > 1 else c[0] for c in zip(*parts)])
        if not merged:
            return None
        return [*merged[:-1], list(index), merged[-1]]

    def strings(self) -> dict[int, str]:
        if "StringIds" not in self.tables:
            return {}
        try:
            return {i: str(v) for i, v in self.con.execute("select id, value from StringIds")
                    if isinstance(i, int)}
        except sqlite3.DatabaseError as exc:
            self.losses.append(f"{self.path.name}: its string table is damaged ({exc}); names are shown by id")
            return {}

    def meta(self) -> dict[str, str]:
        out = {}
        for t in ("EXPORT_META_DATA", "META_DATA_EXPORT", "META_DATA_CAPTURE"):
            if t in self.tables and {"name", "value"} <= self.cols(t):
                try:
                    out.update({str(k): str(v) for k, v in self.con.execute(f"select name, value from {t}")})
                except sqlite3.DatabaseError as exc:
                    self.losses.append(f"{self.path.name}: {t} is damaged ({exc}); skipped")
        return out


class _Rows:
    """Columns of the rows being built (one list of arrays per column)."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in
                                                   ("ts", "dur", "kind", "name", "gpid", "tid", "corr", "stream",
                                                    "device")}

    def add(self, n: int, **cols: Any) -> None:
        for k in self.parts:
            v = cols.get(k, -1)
            self.parts[k].append(np.broadcast_to(np.asarray(v), (n,)).astype(np.int64) if np.ndim(v) == 0 else
                                 np.asarray(v).astype(np.int64))

    def finish(self) -> dict[str, np.ndarray]:
        """The columns, each concatenated then its parts dropped (never every part and every column at once)."""
        out = {}
        for k in list(self.parts):
            v = self.parts.pop(k)
            out[k] = np.concatenate(v) if v else np.empty(0, np.int64)
            del v
        return out


def _as_int64(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values as int64, which were integers): SQLite columns are typed per value, so a damaged or odd
    export can hold NULL, text or floats where Nsight writes integers."""
    if c.dtype.kind in "iub":
        return c.astype(np.int64), np.ones(len(c), bool)
    good = np.array([isinstance(x, (int, np.integer)) and not isinstance(x, bool)
                     and -(1 << 63) <= int(x) < (1 << 63) for x in c.tolist()], bool) if len(c) else np.ones(0, bool)
    out = np.full(len(c), -1, np.int64)
    if good.any():
        out[good] = np.array([int(x) for x, g in zip(c.tolist(), good) if g], np.int64)
    return out, good


def read_nsys(path: Path, step_range: str | None = None) -> list[Run]:
    """Runs from an Nsight Systems SQLite export; a damaged file is salvaged table by table (the losses
    say what), and one whose core tables cannot be read is one sentence."""
    try:
        return _read_nsys(path, step_range)
    except sqlite3.DatabaseError as exc:
        raise InputError(path, f"a damaged SQLite file ({exc})") from None


def _read_nsys(path: Path, step_range: str | None) -> list[Run]:
    db = _Db(path)
    meta = db.meta()
    strings = db.strings()
    names: dict[str, int] = {}

    def code(s: str) -> int:
        return names.setdefault(str(s), len(names))

    def codes_for_ids(ids: np.ndarray, transform: Callable[[str], str] | None = None) -> np.ndarray:
        uniq, inv = np.unique(ids, return_inverse=True)
        table = np.array([code(transform(strings.get(int(i), f"<string {i}>")) if transform else
                               strings.get(int(i), f"<string {i}>")) for i in uniq], np.int64)
        return table[inv]

    rows = _Rows()
    counts: dict[str, int] = {}
    kt = "CUPTI_ACTIVITY_KIND_KERNEL"
    kc = db.cols(kt)
    if kc:
        name_col = "demangledName" if "demangledName" in kc else "shortName"
        got = db.fetch(f"select start, end, {name_col}, globalPid, correlationId, streamId, deviceId from {kt}")
        if got:
            s, e, nm, gp, corr, stream, dev = got
            rows.add(len(s), ts=s, dur=e - s, kind=KERNEL, name=codes_for_ids(nm), gpid=gp, corr=corr,
                     stream=stream, device=dev)
            counts["kernels"] = len(s)
    mt = "CUPTI_ACTIVITY_KIND_MEMCPY"
    mc = db.cols(mt)
    uvm = 0
    if mc:
        src = "srcKind" if "srcKind" in mc else "-1"
        dst = "dstKind" if "dstKind" in mc else "-1"
        got = db.fetch(f"select start, end, copyKind, {src}, {dst}, globalPid, correlationId, streamId, deviceId, "
                       f"bytes from {mt}")
        if got:
            s, e, ck, sk, dk, gp, corr, stream, dev, nbytes = got
            labels = {}
            combo = np.stack([ck, sk, dk], 1)
            uniq, inv = np.unique(combo, axis=0, return_inverse=True)
            for i, (c, a, b) in enumerate(uniq):
                labels[i] = code(_memcpy_name(int(c), int(a), int(b)))
            nm = np.array([labels[i] for i in range(len(uniq))], np.int64)[np.ravel(inv)]
            rows.add(len(s), ts=s, dur=e - s, kind=MEMCPY, name=nm, gpid=gp, corr=corr, stream=stream, device=dev)
            counts["memcpy"] = len(s)
            uvm = int(np.isin(ck, UVM_KINDS).sum())
            counts["memcpy_bytes"] = int(np.nansum(nbytes.astype(float)))
    st = "CUPTI_ACTIVITY_KIND_MEMSET"
    if db.cols(st):
        got = db.fetch(f"select start, end, globalPid, correlationId, streamId, deviceId from {st}")
        if got:
            s, e, gp, corr, stream, dev = got
            rows.add(len(s), ts=s, dur=e - s, kind=MEMSET, name=code("Memset (Device)"), gpid=gp, corr=corr,
                     stream=stream, device=dev)
            counts["memset"] = len(s)
    yt = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    yc = db.cols(yt)
    if yc:
        stype = "syncType" if "syncType" in yc else "deprecatedSyncType"
        gpid = "globalPid" if "globalPid" in yc else "-1"
        got = db.fetch(f"select start, end, {stype}, {gpid}, correlationId, streamId, deviceId from {yt}")
        if got:
            s, e, ty, gp, corr, stream, dev = got
            nm = np.array([code(SYNC_NAMES.get(int(t), "Synchronize")) for t in range(5)] + [code("Synchronize")])
            rows.add(len(s), ts=s, dur=e - s, kind=SYNC, name=nm[np.clip(ty.astype(np.int64), 0, 5)], gpid=gp,
                     corr=corr, stream=stream, device=dev)
    rt = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if db.cols(rt):
        got = db.fetch(f"select start, end, nameId, globalTid, correlationId from {rt}")
        if got:
            s, e, nid, gtid, corr = got
            rows.add(len(s), ts=s, dur=e - s, kind=RUNTIME, name=codes_for_ids(nid, lambda x: _VERSION.sub("", x)),
                     gpid=gtid & ~0xFFFFFF, tid=gtid & 0xFFFFFF, corr=corr)
            counts["runtime"] = len(s)
    nt = "NVTX_EVENTS"
    nc = db.cols(nt)
    steps = 0
    if nc:
        text = "text" if "text" in nc else "NULL"
        tid = "textId" if "textId" in nc else "NULL"
        labelled = db.fetch_labelled(f"select start, end, globalTid, coalesce({text}, ''), coalesce({tid}, -1) "
                                     f"from {nt} where eventType in (59, 60) and end is not null", strings)
        if labelled:
            s, e, gtid, uniq, inv = labelled
            nm, steps = _nvtx_codes(uniq, inv, s, code, step_range)
            rows.add(len(s), ts=s, dur=e - s, kind=USER_ANN, name=nm, gpid=gtid & ~0xFFFFFF, tid=gtid & 0xFFFFFF)
            counts["nvtx"] = len(s)
    cols = rows.finish()
    if not counts.get("kernels") and not counts.get("memcpy") and not counts.get("memset"):
        if db.losses:
            raise InputError(path, f"a damaged Nsight Systems export: {'; '.join(db.losses)}")
        what = "only NVTX ranges" if counts.get("nvtx") else "no CUDA or NVTX activity"
        raise InputError(path, f"an Nsight Systems export with {what}: no GPU activity was recorded; profile with "
                               "`nsys profile --trace=cuda,nvtx …` and export again")
    origin = _session_start(db)
    name_list = list(names)
    runs = _split_ranks(path, cols, name_list, origin, meta, counts, uvm, steps, step_range)
    gpu = _gpu_metrics(db)
    if gpu is not None and runs:
        runs[0].gpu = gpu
    for run in runs:
        run.losses[:0] = db.losses
    db.con.close()
    return runs


def _memcpy_name(copy_kind: int, src: int, dst: int) -> str:
    direction = COPY_KIND.get(copy_kind, "Unknown")
    if copy_kind in UVM_KINDS:
        return f"Memcpy {direction} (Unified Memory migration)"
    a, b = MEM_KIND.get(src), MEM_KIND.get(dst)
    return f"Memcpy {direction} ({a} -> {b})" if a and b else f"Memcpy {direction}"


def _nvtx_codes(uniq: Any, inv: np.ndarray, start: np.ndarray, code: Callable[[str], int],
                step_range: str | None) -> tuple[np.ndarray, int]:
    """NVTX names (``uniq[inv]``) → codes; ranges that mark steps are renamed ``ProfilerStep#k`` (k in time
    order) so the trace analysis finds them as it finds PyTorch's."""
    if step_range:
        is_step = np.array([u == step_range or (u.startswith(step_range) and u[len(step_range)] in " #:,_-=")
                            for u in uniq])
    else:
        is_step = np.array([bool(STEP_LIKE.match(u.strip())) for u in uniq])
    table = np.array([code(u) for u in uniq], np.int64)
    out = table[inv]
    sel = np.flatnonzero(is_step[inv])
    if len(sel) >= 2:
        order = sel[np.argsort(start[sel], kind="stable")]
        for k, row in enumerate(order):
            out[row] = code(f"ProfilerStep#{k}")
        return out, len(order)
    return out, 0


def _session_start(db: _Db) -> int:
    t = "TARGET_INFO_SESSION_START_TIME"
    if "utcEpochNs" in db.cols(t):
        got = db.con.execute(f"select utcEpochNs from {t}").fetchone()
        # a damaged export may hold text or a blob here: no wall-clock start, not a traceback
        if got and isinstance(got[0], int) and not isinstance(got[0], bool) and 0 < got[0] < 2 ** 63:
            return got[0]
    return 0


def _device_names(db: _Db) -> dict[int, str]:
    t = "TARGET_INFO_GPU"
    c = db.cols(t)
    for key in ("id", "deviceId"):  # deviceId: the 2020-era layout (vmId, deviceId, name, busLocation, isDiscrete)
        if {key, "name"} <= c:
            return {int(i): str(n) for i, n in db.con.execute(f"select {key}, name from {t}")}
    t = "TARGET_INFO_CUDA_DEVICE"
    c = db.cols(t)
    if {"cudaId", "name"} <= c:
        return {int(i): str(n) for i, n in db.con.execute(f"select cudaId, name from {t}")}
    return {}


def _split_ranks(path: Path, cols: dict[str, np.ndarray], names: list[str], origin: int, meta: dict[str, Any],
                 counts: dict[str, int], uvm: int, steps: int, step_range: str | None) -> list[Run]:
    """One Run per process with device work (and per device, when a process drove several)."""
    kind = cols["kind"]
    device_rows = np.isin(kind, (KERNEL, MEMCPY, MEMSET))
    pid = (cols["gpid"] >> 24) & 0xFFFFFF
    pairs = sorted({(int(p), int(d)) for p, d in zip(pid[device_rows], cols["device"][device_rows])})
    by_pid: dict[int, list[int]] = {}
    for p, d in pairs:
        by_pid.setdefault(p, []).append(d)
    runs = []
    dev_names = {}
    try:
        dev_names = _device_names(_Db(path))
    except InputError:
        pass
    rank = 0
    for p, devs in by_pid.items():
        for d in devs:
            mine = pid == p
            if len(devs) > 1:  # host rows stay with every device of their process; device rows split
                mine &= ~(device_rows & (cols["device"] != d))
            sel = np.flatnonzero(mine)
            runs.append(_make_run(path, cols, sel, names, origin, p, d, rank, len(pairs), meta,
                                  dev_names.get(d), counts, uvm, steps, step_range))
            rank += 1
    return runs


def _make_run(path: Path, cols: dict[str, np.ndarray], sel: np.ndarray, names: list[str], origin: int, pid: int,
              device: int, rank: int, world: int, meta: dict[str, Any], dev_name: str | None,
              counts: dict[str, int], uvm: int, steps: int, step_range: str | None) -> Run:
    ts = cols["ts"][sel]
    order = np.argsort(ts, kind="stable")
    sel = sel[order]
    c = {k: v[sel] for k, v in cols.items()}
    names = list(names)
    n_device = int(np.isin(c["kind"], (KERNEL, MEMCPY, MEMSET)).sum())
    whole_window = not steps and n_device >= WINDOW_MIN_OPS
    if whole_window:
        # No step ranges: the whole capture is one window, so every per-step rule still reads it
        first, last = int(c["ts"].min()), int((c["ts"] + np.maximum(c["dur"], 0)).max())
        names.append("ProfilerStep#0")
        window = {"ts": first, "dur": last - first, "kind": USER_ANN, "name": len(names) - 1, "gpid": pid << 24,
                  "tid": _most_common(c["tid"][c["tid"] >= 0], -1),
                  "corr": -1, "stream": -1, "device": -1}
        c = {k: np.concatenate([[window[k]], v]) for k, v in c.items()}
    t0 = int(c["ts"].min()) if len(sel) else 0
    kind = c["kind"].astype(np.uint8)
    tid_codes, tids = _codes(c["tid"])
    events = Table({
        "ts": c["ts"] - t0, "dur": np.maximum(c["dur"], 0), "kind": kind,
        "cat": kind.astype(np.int32), "name": c["name"].astype(np.int32),
        "pid": np.zeros(len(kind), np.int32), "tid": tid_codes,
        "corr": c["corr"], "stream": c["stream"], "device": c["device"],
    })
    trace = TraceData(events=events, names=names,
                      cats=["other", "cpu_op", "cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset",
                            "user_annotation", "gpu_user_annotation", "cuda_sync", "python_function", "Trace"],
                      pids=[pid], tids=tids, origin_ns=origin + t0,
                      meta={"distributedInfo": {"rank": rank, "world_size": world}, "deviceProperties":
                            [{"id": device, "name": dev_name}] if dev_name else [], "source": "nsys",
                            "nsys": {k: v for k, v in meta.items() if "VERSION" in k}})
    end = int((events["ts"] + events["dur"]).max()) if len(events) else 0
    n_k = int(((kind == KERNEL)).sum())
    losses = []
    if uvm:
        losses.append(f"{path.name}: {uvm:,} unified-memory page migrations are counted as host↔device copies")
    if whole_window:
        losses.append(f"{path.name}: no NVTX range marks a training step (name one with --step-range NAME); "
                      "the whole capture is analysed as one step-long window")
    elif not steps:
        losses.append(f"{path.name}: no NVTX range marks a training step and only {n_device} GPU operation(s) "
                      f"were captured (fewer than {WINDOW_MIN_OPS}): too little to judge the workload, so the "
                      "per-step rules are not evaluated")
    label = f"{path.name} (pid {pid}, GPU {device})" if world > 1 else path.name
    run_meta: RunMeta = {
        "source": "nsys", "label": label, "rank": rank, "world_size": world, "trace_path": str(path),
        "device": dev_name, "start_ns": origin + t0, "end_ns": origin + t0 + end, "events": len(events),
        "kernels": n_k, "pid": pid, "gpu_index": device, "clock": "epoch" if origin else "trace",
        "nsys_version": meta.get("EXPORT_PRODUCT_VERSION") or meta.get("PRODUCT_VERSION"),
        "nsys_schema": meta.get("EXPORT_SCHEMA_VERSION") or meta.get("SCHEMA_VERSION"),
        "step_range": step_range,
    }
    return Run(meta=run_meta, path=path, trace=trace, losses=losses)


def _codes(values: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    uniq, inv = np.unique(values, return_inverse=True)
    return inv.astype(np.int32), [int(u) for u in uniq]


def _gpu_metrics(db: _Db) -> Table | None:
    """``GPU_METRICS`` (``--gpu-metrics-devices``): SM active / tensor active / DRAM bandwidth samples, per GPU,
    into the ``gpu`` table's activity columns (%)."""
    if not ({"timestamp", "typeId", "metricId", "value"} <= db.cols("GPU_METRICS")) or \
            not ({"metricId", "metricName"} <= db.cols("TARGET_INFO_GPU_METRICS")):
        return None
    wanted = {"SMs Active": "sm_active", "SM Active": "sm_active", "Tensor Active": "tensor_active",
              "Compute Warps in Flight": "sm_occupancy", "DRAM Read Bandwidth": "dram_active",
              "GR Active": "util_gpu"}
    ids = {int(m): wanted[str(n).split(" [")[0]] for m, n in
           db.con.execute("select distinct metricId, metricName from TARGET_INFO_GPU_METRICS")
           if str(n).split(" [")[0] in wanted}
    if not ids:
        return None
    got = db.fetch(f"select timestamp, typeId & 255, metricId, value from GPU_METRICS where metricId in "
                   f"({','.join(map(str, ids))})")
    if not got:
        return None
    t, dev, mid, val = got
    origin = _session_start(db)
    keys = np.unique(np.stack([t, dev], 1), axis=0)
    out: dict[str, np.ndarray] = {"t_ns": keys[:, 0].astype(np.int64) + origin, "gpu": keys[:, 1].astype(np.int32)}
    pos = np.searchsorted(keys[:, 0] * 256 + keys[:, 1], t * 256 + dev)
    for m, column in ids.items():
        col = out.setdefault(column, np.full(len(keys), np.nan))
        sel = mid == m
        col[pos[sel]] = val[sel].astype(float)
    return Table(out)


def _most_common(values: np.ndarray, default: int) -> int:
    """The most frequent value (np.unique, not bincount: a damaged export's thread id may be 2**62)."""
    if not len(values):
        return default
    uniq, counts = np.unique(values, return_counts=True)
    return int(uniq[counts.argmax()])
