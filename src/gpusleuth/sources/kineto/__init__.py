"""PyTorch profiler (Kineto) Chrome-trace JSON → one :class:`~gpusleuth.run.model.Run` per rank.

``load_traces(paths, progress=None)`` is the whole public surface used by the CLI: it streams each file
(plain or gzip, detected by content), decodes it in chunks with msgspec into numpy columns
(:class:`TraceData`, in ``run.trace``), salvages truncated files and states what was lost in
``run.losses``, and raises :class:`~gpusleuth.errors.InputError` for anything that is not a trace.
"""

from __future__ import annotations

import gc
import os
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from gpusleuth.errors import InputError
from gpusleuth.run.meta import RunMeta
from gpusleuth.run.model import Run

from .columns import ColumnBuilder
from gpusleuth.run.trace_data import TraceData

from .model import DEVICE_KINDS, KIND_NAMES
from .reader import ReadResult, open_regular, read_events
from .size import json_size
from .split import read_split, split_point

__all__ = ["load_traces", "load_trace", "distinct_files", "json_size", "TraceData", "KIND_NAMES"]


def load_traces(paths: Sequence[str | Path], progress: Callable[[int, int], None] | None = None) -> list[Run]:
    """Load each trace file into its own Run (one file = one rank).

    ``progress(done_bytes, total_bytes)`` is called after each block read, with byte counts summed
    over all files, so a CLI can draw one bar.
    """
    paths, sizes, notes = distinct_files([Path(p) for p in paths])
    total = sum(sizes)
    runs = []
    offset = 0
    for p, size in zip(paths, sizes):
        cb = None
        if progress is not None:
            base = offset

            def cb(done: int, _total: int, _base: int = base) -> None:
                progress(_base + done, total)

        runs.append(load_trace(p, cb))
        offset += size
    if notes and runs:
        runs[0].losses.extend(notes)
    return runs


def distinct_files(paths: list[Path]) -> tuple[list[Path], list[int], list[str]]:
    """Check every path is a readable regular file (one sentence if not) and read each file once: the same
    file given twice (or through a link) is one rank, not two."""
    seen: dict[tuple[int, int], Path] = {}
    keep, sizes, notes = [], [], []
    for p in paths:
        with open_regular(p) as f:
            st = os.fstat(f.fileno())
        key = (st.st_dev, st.st_ino)
        if key in seen:
            notes.append(f"{p} is the same file as {seen[key]}; read once (one rank)")
            continue
        seen[key] = p
        keep.append(p)
        sizes.append(st.st_size)
    return keep, sizes, notes


def load_trace(path: str | Path, progress: Callable[[int, int], None] | None = None,
               two_processes: bool = True) -> Run:
    """Load one trace file. GC is paused while decoding: millions of short-lived objects would
    otherwise trigger collections that double the decode time and find nothing to free. A big file is read
    by two processes where a second CPU is usable (``split.py``), with the same answer; ``two_processes=False``
    where the caller's workers already share the cores out (a trace set's Ray tasks)."""
    path = Path(path)
    builder = ColumnBuilder()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        split = split_point(path) if two_processes else None
        res = read_split(path, builder, split, progress) if split is not None else None
        if res is None:
            builder = ColumnBuilder()
            res = read_events(path, builder, progress)
        if progress is not None:  # reading may stop before EOF (gzip trailer, damage): finish the bar
            size = path.stat().st_size
            progress(size, size)
        base = _meta_value(res, "baseTimeNanoseconds")
        if isinstance(base, (int, float)) and not isinstance(base, bool) and 0 < base < 2**62:
            base = int(base)
        else:
            if base is not None:
                res.notes.append(f"ignored an implausible baseTimeNanoseconds ({str(base)[:40]}); times are "
                                 "on the trace's own clock")
            base = None
        if res.truncated and res.tail is None and base is None:
            res.notes.append("the metadata after the events (baseTimeNanoseconds, displayTimeUnit) was lost "
                             "with the cut-off end; times are on the trace's own clock")
        trace = builder.finish(base)
    except MemoryError:
        raise InputError(path, "not enough memory to load this trace") from None
    finally:
        if was_enabled:
            gc.enable()
    if builder.rows == 0 and res.lost_bytes and res.head is None and res.tail is None:
        raise InputError(path, "a JSON array that holds no trace events (expected a PyTorch profiler / Kineto "
                               "Chrome trace)")
    trace.meta = _trace_meta(res, base, builder)
    return _make_run(path, trace, res)


def _meta_value(res: ReadResult, key: str) -> object:
    for part in (res.head, res.tail):
        v = getattr(part, key, None) if part is not None else None
        if v is not None:
            return v
    return None


def _trace_meta(res: ReadResult, base: int | None, builder: ColumnBuilder) -> dict[str, Any]:
    dist = _meta_value(res, "distributedInfo")
    props = _meta_value(res, "deviceProperties")
    return {
        "distributedInfo": dist if isinstance(dist, dict) else None,
        "deviceProperties": props if isinstance(props, list) else [],
        "displayTimeUnit": _meta_value(res, "displayTimeUnit"),
        "baseTimeNanoseconds": base,
        "schemaVersion": _meta_value(res, "schemaVersion"),
        "ts_scaled_from_ns": getattr(builder, "ts_in_ns", False),
    }


def _device_name(trace: TraceData) -> str | None:
    """The GPU this rank used: the deviceProperties entry whose id is the most common ``device`` arg."""
    props = [p for p in trace.meta["deviceProperties"] if isinstance(p, dict)]
    if not props:
        return None
    kind = trace.events["kind"]
    devs = trace.events["device"][np.isin(kind, DEVICE_KINDS)]
    devs = devs[devs >= 0]
    if len(devs):
        values, counts = np.unique(devs, return_counts=True)  # not bincount: a device id may be 2**53
        want = int(values[counts.argmax()])
        for p in props:
            found = p.get("name")
            if p.get("id") == want and isinstance(found, str):
                return found
    name = props[0].get("name")
    return name if isinstance(name, str) else None


def _whole(value: object) -> int | None:
    """A rank or world size as JSON allows it: ``3`` and ``3.0`` are the same number; ``true``, ``"3"``,
    fractions and absurd sizes are not a rank."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    return int(value) if 0 <= value < 1 << 31 else None


def _make_run(path: Path, trace: TraceData, res: ReadResult) -> Run:
    dist = trace.meta["distributedInfo"] or {}
    rank = _whole(dist.get("rank"))
    world = _whole(dist.get("world_size"))
    ev = trace.events
    start_ns: int | None
    end_ns: int | None
    if len(ev):
        start_ns = trace.origin_ns + int(ev["ts"].min())
        end_ns = trace.origin_ns + int((ev["ts"] + np.maximum(ev["dur"], 0)).max())
    else:
        start_ns = end_ns = None
    name = path.name
    label = f"{name} (rank {rank})" if rank is not None else name
    losses = []
    if res.truncated:
        kept = len(ev)
        losses.append(
            f"{path.name}: the trace is cut off or damaged; salvaged {kept:,} complete events, lost about "
            f"{res.lost_events_estimate:,} event(s) ({res.lost_bytes:,} bytes of JSON text)")
    losses += [f"{path.name}: {n}" for n in res.notes]
    losses += [f"{path.name}: dropped {n:,} {why}" for why, n in trace.dropped.items()]
    meta: RunMeta = {
        "source": "kineto",
        "label": label,
        "rank": rank,
        "world_size": world,
        "trace_path": str(path),
        "device": _device_name(trace),
        "start_ns": start_ns,
        "end_ns": end_ns,
        "events": len(ev),
        "event_phases": dict(Counter(trace.phase_counts)),
        "clock": "epoch" if trace.meta["baseTimeNanoseconds"] else "trace",
    }
    return Run(meta=meta, path=path, trace=trace, losses=losses)
