"""``load_run``: any run directory, finished or cut off, into the one :class:`Run` model; ``find_run_dirs``:
the run directories among what the user named. File names come from :class:`RunDir` (``run/layout.py``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpusleuth.errors import InputError
from gpusleuth.run.files import check_regular, is_directory
from gpusleuth.sources.stalls import read_stalls
from gpusleuth.serving.sources.engine_metrics import read_engine_scrapes
from gpusleuth.sources.events import parse_event_files
from gpusleuth.run.layout import (BATCHES_TABLE, LOAD_TABLE, REQUESTS_TABLE, SUMMARY_FILE, TELEMETRY_TABLES, RunDir)
from gpusleuth.run.meta import RunMeta
from gpusleuth.run.model import Run, Table
from gpusleuth.run.mllog import MlLog
from gpusleuth.sources.mllog import read_mllog
from gpusleuth.run.recording import RECORDING, UNFINISHED, recording_state
from gpusleuth.run.streams import read_stream
from gpusleuth.recorder.schemas import ADDED_LATER, SCHEMAS


def load_run(path: str | Path) -> Run:
    """Load a run directory. Damaged parts are salvaged and the loss is listed in ``run.losses``."""
    run_dir = Path(path)
    if not run_dir.exists():
        raise InputError(run_dir, "no such file or directory")
    if not run_dir.is_dir():
        raise InputError(run_dir, "expected a gpusleuth run directory (or pass a profiler trace .json[.gz])")
    layout = RunDir(run_dir)
    meta_notes: list[str] = []
    meta = layout.read_meta(meta_notes)
    run = Run(meta=meta, path=run_dir, losses=meta_notes)
    state = recording_state(run_dir, meta.get("end_ns"))
    live = state == RECORDING
    if state == UNFINISHED and meta.get("end_ns") is None:
        run.losses.append(
            "the run has no recorded end (its launcher was killed): its end is taken as the last sample; "
            f"`gpusleuth finalize {run_dir}` makes it final"
        )
    for name in TELEMETRY_TABLES:
        table, loss = _read_table(run_dir, name, live)
        if loss:
            run.losses.append(loss)
        setattr(run, name, table)
    cut = _snapshot_end(run) if live else None
    if cut is not None:
        meta["end_ns"] = min(cut, meta.get("end_ns") or cut)
        for name in TELEMETRY_TABLES:
            setattr(run, name, _before(getattr(run, name), "t_ns", cut))
        run.losses.append(f"the run is still being recorded: this report is a snapshot of it up to "
                          f"{(cut - (meta.get('start_ns') or cut)) / 1e9:.1f} s (its last sample written)")
    if meta.get("end_ns") is None:
        last = [int(t["t_ns"].max()) for t in (run.host, run.gpu) if len(t)]
        if last:
            meta["end_ns"] = max(last)
    events = parse_event_files(run_dir, meta.get("end_ns"), live)
    if not len(events.steps) and layout.table("steps").exists():
        events.steps, loss = _read_table(run_dir, "steps")
        if loss:
            run.losses.append(loss)
    if meta.get("end_ns") is None and len(events.steps):
        meta["end_ns"] = int(events.steps["end_ns"].max())
    if meta.get("start_ns") is None:
        _recover_start(run, run_dir, events.steps)
    if cut is not None:  # every source up to the same moment: a step or request written after it waits
        for name in ("steps", "phases", "comm", "requests"):
            setattr(events, name, _before(getattr(events, name), "end_ns", cut))
    run.steps, run.phases, run.logs = events.steps, events.phases, events.logs
    run.comm = events.comm
    run.requests = events.requests
    if not len(run.requests) and layout.table(REQUESTS_TABLE).exists():  # raw/ deleted: the finalized table
        run.requests, loss = _read_table(run_dir, REQUESTS_TABLE)
        if loss:
            run.losses.append(loss)
    run.batches = events.batches
    run.engine, loss = read_engine_scrapes(run_dir)
    if loss:
        run.losses.append(loss)
    if not len(run.batches) and layout.table(BATCHES_TABLE).exists():
        run.batches, loss = _read_table(run_dir, BATCHES_TABLE)
        if loss:
            run.losses.append(loss)
    run.processes, run.infos = events.processes, events.infos
    run.losses.extend(events.losses)
    run.losses.extend(meta.get("losses") or [])
    lost = _steps_lost_at_kill(meta, run.steps, events.exited)
    if lost:
        run.losses.append(lost)
    _attach_traces(run, run_dir)
    _read_load(run, run_dir)
    run.stalls = read_stalls(run_dir, run.losses)
    run.mllog = _captured_mllog(layout, run.losses)
    return run


def _captured_mllog(layout: RunDir, losses: list[str]) -> MlLog | None:
    """The MLLOG lines of the job's captured output (time-to-train's events), None where it printed none."""
    output = layout.output_log
    if not output.exists():
        return None
    try:
        log = read_mllog(output)
    except InputError as exc:
        losses.append(f"{output.name}: {exc.problem}; no MLLOG events read from it")
        return None
    return log if log.events else None


__all__ = ["RunDir", "SUMMARY_FILE", "find_run_dirs", "load_run"]


def find_run_dirs(paths: list[Path], left_out: list[str] | None = None) -> list[Path]:
    """Run directories given, or directly inside a given directory (one level: a folder of runs). A folder
    that cannot be entered is named in ``left_out`` (one line each), never skipped in silence: it may hold
    runs; one that can be entered and has no meta.json is simply not a run."""
    found: list[Path] = []
    for p in paths:
        p = Path(p)
        if not is_directory(p):
            raise InputError(p, "not a directory (fleet tabulates run directories or folders of them; "
                                "`gpusleuth report` reads a trace or a log)")
        if _is_run(p, None):
            found.append(p)
            continue
        try:
            with os.scandir(p) as it:
                subdirs = [Path(d.path) for d in it if d.is_dir()]
        except OSError as exc:
            raise InputError(p, f"cannot be read ({exc.strerror or exc}: you may not enter this directory)"
                             ) from None
        found.extend(d for d in subdirs if _is_run(d, left_out))
    return sorted(found)


def _is_run(path: Path, left_out: list[str] | None) -> bool:
    """Does ``path`` hold meta.json? A folder that refuses the look is a line in ``left_out``."""
    try:
        os.stat(RunDir(path).meta_file)
    except FileNotFoundError:
        return False
    except OSError as exc:  # permission denied on the way in, a name too long, an I/O error
        if left_out is not None:
            left_out.append(f"{path}: cannot be entered ({exc.strerror or exc}); left out")
        return False
    return RunDir(path).is_run()


LOAD_COLUMNS = ("level", "concurrency", "rate", "start_ns", "end_ns", "status")


def _read_load(run: Run, run_dir: Path) -> None:
    """``load.parquet`` (``gpusleuth load``): kept only when its columns are what analysis expects."""
    table, loss = _read_table(run_dir, LOAD_TABLE)
    if loss:
        run.losses.append(loss.replace("its samples are", "the load results are"))
        return
    if not len(table):
        return
    bad = [c for c in LOAD_COLUMNS if c not in table.columns or table[c].dtype.kind not in "iuf"]
    if bad or "error" not in table.columns:
        run.losses.append(f"{LOAD_TABLE}.parquet lacks usable columns ({', '.join(bad or ['error'])}); "
                          "the load results are missing from this report")
        return
    run.load = table


def _steps_lost_at_kill(meta: RunMeta, steps: Table, exited: dict[int, int]) -> str | None:
    """A job killed by a signal (or ending through ``os._exit`` with an error) never runs the hook's last
    flush: the steps after it (≤ ~0.5 s, the hook's flush period) are not in the run. Estimate them from the
    gap between the last recorded step and the job's end, in median step times — unless every process
    with steps wrote its exit mark (``exited``): its last flush ran, nothing is missing (a job ended by
    Ctrl-C unwinds through it, and its shutdown after the last step is no lost step)."""
    ended_badly = meta.get("signal") or (meta.get("exit_code") or 0) != 0
    end_ns = meta.get("end_ns")
    if not ended_badly or len(steps) < 3 or "end_ns" not in steps.columns or end_ns is None:
        return None
    if "pid" in steps.columns and all(int(p) in exited for p in np.unique(steps["pid"])):
        return None
    ends = np.asarray(steps["end_ns"], dtype=np.float64)
    durs = ends - np.asarray(steps["start_ns"], dtype=np.float64)
    med = float(np.median(durs[durs > 0])) if (durs > 0).any() else 0.0
    gap = float(end_ns) - float(np.nanmax(ends))
    if med <= 0 or gap < med:
        return None
    n = int(gap // med)
    how = f"killed by {meta['signal']}" if meta.get("signal") else f"ended with exit code {meta.get('exit_code')}"
    return (f"the job was {how} before the hook's last write: about {n:,} step(s) ({gap / 1e9:.2f} s) after the "
            "last recorded step are missing (or the job did other work after its last step)")


def _recover_start(run: Run, run_dir: Path, steps: Table) -> None:
    """meta.json lost its start (damage): take the first thing recorded, or give up with a sentence."""
    firsts = [int(t["t_ns"].min()) for t in (run.host, run.gpu) if len(t) and "t_ns" in t.columns]
    if len(steps) and "start_ns" in steps.columns:
        firsts.append(int(np.min(steps["start_ns"])))
    firsts = [t for t in firsts if 0 < t < 2**62]
    if not firsts:
        raise InputError(RunDir(run_dir).meta_file, "has no valid start_ns and the run holds no samples or steps")
    run.meta["start_ns"] = min(firsts)
    run.losses.append("the run's start time was missing or damaged in meta.json: taken as its first sample")
    start_ns, end_ns = run.meta.get("start_ns"), run.meta.get("end_ns")
    if end_ns is not None and start_ns is not None and end_ns < start_ns:
        run.meta["end_ns"] = None


def _snapshot_end(run: Run) -> int | None:
    """The moment up to which every sampler of a live run has written: the earliest of their last samples
    (each flushes about once a second; cutting everything there makes the tables agree)."""
    last = [int(t["t_ns"].max()) for t in (run.host, run.gpu) if len(t) and "t_ns" in t.columns]
    return min(last) if last else None


def _before(table: Table, column: str, cut: int) -> Table:
    if not len(table) or column not in table.columns:
        return table
    return table.filter(np.asarray(table[column]) <= cut)


def _read_table(run_dir: Path, name: str, live: bool = False) -> tuple[Table, str | None]:
    """The table from Parquet, else from its Arrow stream. ``live``: the run is being recorded, so a batch
    cut off at the stream's end is one being written (not a loss), and a stream that vanishes under us was
    just converted by the launcher's finalization (read the Parquet it became)."""
    table, loss = _read_table_once(run_dir, name, live)
    if live and loss and RunDir(run_dir).table(name).exists():
        table, loss = _read_table_once(run_dir, name, live)
    return table, loss


def _read_table_once(run_dir: Path, name: str, live: bool) -> tuple[Table, str | None]:
    parquet = RunDir(run_dir).table(name)
    if parquet.exists():
        try:
            check_regular(parquet, "a Parquet file")
            table = _parquet_table(parquet)
            wrong = _off_schema(name, table)
            if wrong:
                return Table(), (f"{parquet.name} does not hold the columns a recording writes ({wrong}); its "
                                 "samples are missing from this report")
            return table, None
        except InputError as exc:
            return Table(), f"{parquet.name} {exc.problem}; its samples are missing from this report"
        except (pa.ArrowException, OSError, ValueError) as exc:
            return Table(), f"{parquet.name} is unreadable ({exc}); its samples are missing from this report"
    stream = RunDir(run_dir).stream(name)
    if stream.exists():
        arrow, loss = read_stream(stream, live=live)
        table = _arrow_to_table(arrow) if arrow is not None else Table()
        wrong = _off_schema(name, table)
        if wrong:
            return Table(), (f"{stream.name} does not hold the columns a recording writes ({wrong}); its "
                             "samples are missing from this report")
        return table, loss
    return Table(), None


def _off_schema(name: str, table: Table) -> str | None:
    """What keeps a telemetry table from being the recorder's (a file swapped for another table, columns
    renamed or rewritten as text by some tool): analysis indexes these columns as numbers."""
    schema = SCHEMAS.get(name)
    if schema is None or not len(table):
        return None
    optional = ADDED_LATER.get(name, frozenset())
    missing = [f.name for f in schema if f.name not in table.columns and f.name not in optional]
    if missing:
        return "no " + ", ".join(missing[:4]) + (" …" if len(missing) > 4 else "")
    numeric = [f.name for f in schema if (pa.types.is_integer(f.type) or pa.types.is_floating(f.type))
               and f.name in table.columns]
    text = [c for c in numeric if table[c].dtype.kind not in "iufb"]
    return ("not numbers: " + ", ".join(text[:4])) if text else None


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
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            # one numpy array per row (load.parquet's token_ns); np.asarray would make equal-length lists 2-D
            arr = np.empty(len(col), dtype=object)
            for i, v in enumerate(col.to_pylist()):
                arr[i] = np.asarray(v if v is not None else [], dtype=np.float64 if _floats(t) else np.int64)
        else:
            arr = np.asarray(col.to_pylist(), dtype=object)
        cols[name] = arr
    return Table(cols)


def _floats(t: pa.DataType) -> bool:
    return bool(pa.types.is_floating(t.value_type))


def _attach_traces(run: Run, run_dir: Path) -> None:
    """Profiler traces taken with ``--profile-steps`` live in ``trace/``; read them lazily via kineto."""
    trace_dir = RunDir(run_dir).trace_dir
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
