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
from gpusleuth.run.layout import LOGS_FILE, TELEMETRY_TABLES
from gpusleuth.run.model import Table
from gpusleuth.run.streams import STREAM_SUFFIX, stream_to_parquet


def needs_finalize(run_dir: Path) -> bool:
    run_dir = Path(run_dir)
    return any(run_dir.glob(f"*{STREAM_SUFFIX}")) or (
        (run_dir / "raw").is_dir() and not (run_dir / "steps.parquet").exists()
    )


def finalize_run_dir(run_dir: Path, end_ns: int | None = None) -> list[str]:
    """Convert streams to Parquet and events to tables. Returns loss notes (empty when all was clean).

    Never raises for a write that fails (disk full, read-only directory, quota): what could not be
    written is said in the notes, the Arrow streams and raw events stay where they are, and
    ``gpusleuth report`` reads the run from them as it is."""
    run_dir = Path(run_dir)
    losses: list[str] = []
    for name in TELEMETRY_TABLES:
        stream = run_dir / f"{name}{STREAM_SUFFIX}"
        if stream.exists():
            parquet = run_dir / f"{name}.parquet"
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
    for path, table in ((run_dir / "steps.parquet", events.steps), (run_dir / "phases.parquet", events.phases),
                        (run_dir / "requests.parquet", events.requests), (run_dir / "batches.parquet", events.batches)):
        try:
            write_table(path, table)
        except OSError as exc:
            _unwritable(losses, path.name, "raw/", exc)
    if events.logs:
        try:
            with open(run_dir / LOGS_FILE, "w") as f:
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
