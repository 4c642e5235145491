"""``load_run``: any run directory, finished or cut off, into the one :class:`Run` model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpusleuth.errors import InputError
from gpusleuth.run.events import parse_event_files
from gpusleuth.run.layout import TELEMETRY_TABLES
from gpusleuth.run.meta import read_meta
from gpusleuth.run.model import Run, Table
from gpusleuth.run.streams import STREAM_SUFFIX, read_stream


def load_run(path: str | Path) -> Run:
    """Load a run directory. Damaged parts are salvaged and the loss is listed in ``run.losses``."""
    run_dir = Path(path)
    if not run_dir.exists():
        raise InputError(run_dir, "no such file or directory")
    if not run_dir.is_dir():
        raise InputError(run_dir, "expected a gpusleuth run directory (or pass a profiler trace .json[.gz])")
    meta = read_meta(run_dir)
    run = Run(meta=meta, path=run_dir)
    if meta.get("end_ns") is None:
        run.losses.append(
            "the run has no recorded end (the launcher was killed?): its end is taken as the last sample"
        )
    for name in TELEMETRY_TABLES:
        table, loss = _read_table(run_dir, name)
        if loss:
            run.losses.append(loss)
        setattr(run, name, table)
    if meta.get("end_ns") is None:
        last = [int(t["t_ns"].max()) for t in (run.host, run.gpu) if len(t)]
        if last:
            meta["end_ns"] = max(last)
    events = parse_event_files(run_dir, meta.get("end_ns"))
    if not len(events.steps) and (run_dir / "steps.parquet").exists():
        events.steps = _parquet_table(run_dir / "steps.parquet")
    if meta.get("end_ns") is None and len(events.steps):
        meta["end_ns"] = int(events.steps["end_ns"].max())
    run.steps, run.phases, run.logs = events.steps, events.phases, events.logs
    run.comm = events.comm
    run.processes, run.infos = events.processes, events.infos
    run.losses.extend(events.losses)
    run.losses.extend(meta.get("losses") or [])
    _attach_traces(run, run_dir)
    return run


def _read_table(run_dir: Path, name: str) -> tuple[Table, str | None]:
    parquet = run_dir / f"{name}.parquet"
    if parquet.exists():
        try:
            return _parquet_table(parquet), None
        except (pa.ArrowInvalid, OSError) as exc:
            return Table(), f"{parquet.name} is unreadable ({exc}); its samples are missing from this report"
    stream = run_dir / f"{name}{STREAM_SUFFIX}"
    if stream.exists():
        table, loss = read_stream(stream)
        return (_arrow_to_table(table) if table is not None else Table()), loss
    return Table(), None


def _parquet_table(path: Path) -> Table:
    return _arrow_to_table(pq.read_table(path))


def _arrow_to_table(table: pa.Table) -> Table:
    cols = {}
    for name in table.column_names:
        col = table.column(name)
        t = col.type
        if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
            if col.null_count and not pa.types.is_floating(t):
                arr = col.to_numpy(zero_copy_only=False).astype(np.float64)
            else:
                arr = col.to_numpy(zero_copy_only=False)
                if pa.types.is_floating(t) and col.null_count:
                    arr = np.asarray(arr, dtype=np.float64)
        else:
            arr = np.asarray(col.to_pylist(), dtype=object)
        cols[name] = arr
    return Table(cols)


def _attach_traces(run: Run, run_dir: Path) -> None:
    """Profiler traces taken with ``--profile-steps`` live in ``trace/``; read them lazily via kineto."""
    trace_dir = run_dir / "trace"
    if not trace_dir.is_dir():
        return
    files = sorted(p for p in trace_dir.iterdir() if p.name.endswith((".json", ".json.gz")))
    if not files:
        return
    try:
        from gpusleuth.sources.kineto import load_traces
    except ImportError:  # trace engine not available in this build
        return
    try:
        runs = load_traces(files)
    except InputError as exc:
        run.losses.append(f"profiler trace unreadable: {exc}")
        return
    run.profiles = runs
