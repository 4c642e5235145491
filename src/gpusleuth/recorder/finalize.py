"""Turn a run directory that was being written into its final, portable form.

Called by the launcher when a run ends, and by ``gpusleuth report`` on a directory nobody finalized
(launcher killed). Idempotent: finalizing twice changes nothing. Never deletes data it could not
convert and verify.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gpusleuth.sources.events import parse_event_files
from gpusleuth.run.layout import BATCHES_TABLE, LOGS_FILE, REQUESTS_TABLE, TELEMETRY_TABLES, RunDir
from gpusleuth.run.model import Table
from gpusleuth.run.streams import stream_to_parquet


def needs_finalize(run_dir: Path) -> bool:
    run_dir = Path(run_dir)
    layout = RunDir(run_dir)
    return bool(layout.streams()) or (
        layout.raw.is_dir() and not layout.table("steps").exists()
    )


def finalize_run_dir(run_dir: Path, end_ns: int | None = None) -> list[str]:
    """Convert streams to Parquet and events to tables. Returns loss notes (empty when all was clean).

    Never raises for a write that fails (disk full, read-only directory, quota): what could not be
    written is said in the notes, the Arrow streams and raw events stay where they are, and
    ``gpusleuth report`` reads the run from them as it is."""
    run_dir = Path(run_dir)
    losses: list[str] = []
    for name in TELEMETRY_TABLES:
        stream = RunDir(run_dir).stream(name)
        if stream.exists():
            parquet = RunDir(run_dir).table(name)
            try:
                if parquet.exists():
                    # A previous finalize wrote Parquet but died before removing the stream: both hold
                    # the same rows; keep the verified Parquet.
                    stream.unlink()
                    continue
                note = stream_to_parquet(stream, parquet)
            except OSError as exc:
                _unwritable(losses, parquet.name, stream.name, exc)
                continue
            if note:
                losses.append(note)
    events = parse_event_files(run_dir, end_ns)
    losses.extend(events.losses)
    layout = RunDir(run_dir)
    for path, table in ((layout.table("steps"), events.steps), (layout.table("phases"), events.phases),
                        (layout.table(REQUESTS_TABLE), events.requests), (layout.table(BATCHES_TABLE), events.batches)):
        try:
            write_table(path, table)
        except OSError as exc:
            _unwritable(losses, path.name, "raw/", exc)
    if events.logs:
        try:
            with open(layout.logs, "w") as f:
                for rec in events.logs:
                    f.write(json.dumps(rec, default=str) + "\n")
        except OSError as exc:
            _unwritable(losses, LOGS_FILE, "raw/", exc)
    return losses


def _unwritable(losses: list[str], target: str, kept: str, exc: OSError) -> None:
    losses.append(f"could not write {target} ({exc.strerror or exc}); nothing is lost: {kept} is kept and "
                  "`gpusleuth report` reads it (run it again with space to finalize the run)")


def write_table(path: Path, table: Table) -> None:
    if not len(table):
        return
    cols = {}
    for name, values in table.columns.items():
        cols[name] = pa.array(values.tolist() if values.dtype == object else values)
    tmp = path.with_suffix(".parquet.tmp")
    try:
        pq.write_table(pa.table(cols), tmp, compression="zstd")
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()


def finalize_unfinished(run_dir: Path) -> list[str]:
    """``gpusleuth finalize``: make final a run whose launcher died (kill -9, a lost node): the Parquet
    tables, the end taken as the last sample, every loss in ``meta.json`` so later reports state them, and
    the launcher's leftovers (space reserve, lock file) removed. Refuses a run still being recorded.
    Returns the notes (losses) now in meta.json."""
    from gpusleuth.errors import InputError
    from gpusleuth.run.layout import RunDir
    from gpusleuth.run.recording import RECORDING, recording_state
    from gpusleuth.sources.rundir import load_run

    layout = RunDir(run_dir)
    meta = layout.read_meta()
    if recording_state(layout.path, meta.get("end_ns")) == RECORDING:
        raise InputError(layout.path, "is still being recorded (its launcher holds it); finalize it once it ends")
    run = load_run(layout.path)  # the end from the last sample, and what could not be read
    notes = finalize_run_dir(layout.path, run.end_ns)
    said = [m.split("; `gpusleuth finalize", 1)[0] for m in run.losses]  # it is final now
    losses = list(dict.fromkeys([*(meta.get("losses") or []), *said, *notes]))
    if meta.get("end_ns") is None:
        meta["end_ns"] = run.end_ns
    kept: list[str] = [m for m in losses if not m.startswith("meta.json: ")]
    meta["losses"] = kept
    try:
        layout.write_meta(meta)
    except OSError as exc:
        raise InputError(layout.path, f"cannot write meta.json ({exc.strerror or exc})") from None
    for leftover in (layout.reserve, layout.recording_lock):
        try:
            leftover.unlink(missing_ok=True)
        except OSError:
            pass
    return kept
