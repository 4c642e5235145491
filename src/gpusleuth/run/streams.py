"""Crash-safe table files: Arrow IPC streams while recording, Parquet once finished.

Why streams: a Parquet file is only readable once its footer is written, so a recorder killed mid-run
would lose everything. An Arrow IPC stream is a sequence of self-contained record batches; appending one
per second costs microseconds and a reader can take every complete batch of a file cut off anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpusleuth.run.layout import STREAM_SUFFIX  # noqa: F401  (the streams' suffix, re-exported)


class _Pending:
    """The Arrow writer's sink: bytes collect here and reach the file only as whole messages."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def write(self, b: bytes) -> int:
        self.data += b
        return len(b)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class TableStreamWriter:
    """Accumulates rows of one table and appends them to ``<name>.arrows`` as record batches.

    Disk full: the IPC bytes of each flush are written in one piece; if that fails the file is cut back
    to its last complete batch and the bytes stay pending, so the file is always readable to its end and
    the rows are written at the next flush that finds space (the failure is raised for the caller to count).
    """

    def __init__(self, path: Path, schema: pa.Schema):
        self.path = Path(path)
        self.schema = schema
        self._names = schema.names
        self._pending: dict[str, list[Any]] = {n: [] for n in self._names}
        self._rows = 0
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._good = os.fstat(self._fd).st_size
        self._out = _Pending()
        # zstd per buffer: a day at 10 Hz on 8 GPUs was 277 MB/GPU of streams uncompressed (BENCHMARKS.md)
        self._writer = pa.ipc.new_stream(self._out, schema, options=pa.ipc.IpcWriteOptions(compression="zstd"))

    def append(self, row: dict[str, Any]) -> None:
        get = row.get
        for name in self._names:
            self._pending[name].append(get(name))
        self._rows += 1

    def extend(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            self.append(row)

    def flush(self) -> int:
        """Write pending rows as one batch and push it to the OS; returns the rows written."""
        n = self._rows
        if n:
            batch = pa.RecordBatch.from_pydict(self._pending, schema=self.schema)
            self._writer.write_batch(batch)
            self._pending = {name: [] for name in self._names}
            self._rows = 0
        self._write_out()
        return n

    def _write_out(self) -> None:
        data = self._out.data
        if not data:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            view.release()
            try:
                os.ftruncate(self._fd, self._good)  # no partial message: the file stays readable
            except OSError:
                pass
            raise
        view.release()
        self._good += len(data)
        self._out.data = bytearray()

    def close(self) -> None:
        try:
            self.flush()
            self._writer.close()
            self._write_out()
        finally:
            os.close(self._fd)


def read_stream(path: Path, live: bool = False) -> tuple[pa.Table | None, str | None]:
    """Read every complete batch of a stream; the second value says what was lost, if anything.
    ``live``: the recorder is still appending, so a batch cut off at the end is one being written, no loss."""
    path = Path(path)
    from gpusleuth.errors import InputError
    from gpusleuth.run.files import open_regular

    try:
        f = open_regular(path, "an Arrow stream")
        size = os.fstat(f.fileno()).st_size
    except InputError as exc:
        return None, f"{path.name} {exc.problem}; its samples are missing"
    if size == 0:
        f.close()
        if live:
            return None, None  # its first batch is not written yet
        return None, f"{path.name} is empty (the recorder stopped before its first flush)"
    batches: list[pa.RecordBatch] = []
    schema = None
    loss = None
    with f:
        try:
            reader = pa.ipc.open_stream(f)
            schema = reader.schema
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                # A batch read from damaged bytes can hold offsets/lengths pointing anywhere: writing it
                # out crashes the process. Full validation (~µs per batch) turns that into a stated loss.
                try:
                    batch.validate(full=True)
                except (pa.ArrowException, ValueError) as exc:
                    loss = (f"{path.name} is damaged after {sum(b.num_rows for b in batches)} rows (a record "
                            f"batch fails validation: {str(exc)[:80]}); kept the rows before it")
                    break
                batches.append(batch)
        except (pa.ArrowException, OSError, EOFError, ValueError) as exc:
            good = sum(b.num_rows for b in batches)
            loss = None if live and schema is not None else (
                f"{path.name} was cut off or damaged (the writer was killed mid-write?): kept {good} complete "
                f"rows, lost the partial batch after them ({exc.__class__.__name__})"
            )
    if schema is None:
        return None, loss or f"{path.name} has no readable schema"
    return pa.Table.from_batches(batches, schema=schema), loss


def stream_to_parquet(stream: Path, parquet: Path) -> str | None:
    """Convert one stream into Parquet, verify it, then remove the stream. Returns a loss note or None."""
    import pyarrow.parquet as pq

    table, loss = read_stream(stream)
    if table is None:
        # Nothing readable: keep the stream so nothing the user recorded is deleted by us.
        return loss
    tmp = parquet.with_suffix(".parquet.tmp")
    try:
        pq.write_table(table, tmp, compression="zstd")
        if pq.read_metadata(tmp).num_rows != table.num_rows:  # pragma: no cover - disk trouble
            return f"could not verify {parquet.name}; kept {stream.name}"
        os.replace(tmp, parquet)
    except pa.ArrowException as exc:  # pyarrow's own I/O errors (disk full) are not always OSError
        raise OSError(getattr(exc, "errno", None) or 28, str(exc)) from None
    finally:
        if tmp.exists():  # a half-written file must not fill what is left of the disk
            tmp.unlink()
    stream.unlink()
    return loss
