"""Room for a run's last writes on a disk the job filled, and a place for the events that found none.

Why: a job that fills the disk (checkpoints, logs) left the run with no room for its end: ``meta.json``
kept no end or exit code, the recorder's last rows and the hook's step events were refused, and the report
said "wall 1.05 s" for a 28 s run. So the launcher holds a little space from the start (a preallocated
``.space-reserve``) and frees it when the job ends, just before those writes. Step events the job's disk
refused even at exit go to a spill directory on another filesystem (the hook keeps them in memory until
then); the launcher appends them to the run once the reserve is freed, or says exactly where they are.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from gpusleuth.run.layout import RunDir

RESERVE_BYTES = (1 << 20, 1 << 16)  # try 1 MiB, else 64 KiB: meta.json and the last flushes fit in either


def reserve_space(run_dir: Path) -> Path | None:
    """Preallocate the reserve file; None when the disk has not even 64 KiB (the run goes on without)."""
    path = RunDir(run_dir).reserve
    for size in RESERVE_BYTES:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
            return path
        except OSError:
            path.unlink(missing_ok=True)
    return None


def release_space(reserve: Path | None) -> None:
    if reserve is not None:
        try:
            reserve.unlink(missing_ok=True)
        except OSError:
            pass


def spill_dir(run_dir: Path) -> Path | None:
    """A private directory for the hook's spilled events on another filesystem than the run's (the temp
    directory, else /dev/shm); the temp directory even when it shares the run's disk, else None."""
    try:
        run_dev = os.stat(run_dir).st_dev
    except OSError:
        return None
    candidates = [tempfile.gettempdir(), "/dev/shm"]
    other = [c for c in candidates if _device(c) not in (None, run_dev)]
    for base in other + candidates[:1]:
        try:
            return Path(tempfile.mkdtemp(prefix="gpusleuth-spill-", dir=base))
        except OSError:
            continue
    return None


def _device(path: str) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


def merge_spill(spill: Path | None, run_dir: Path) -> list[str]:
    """Append each spilled events file to the run's own (it continues exactly where the disk refused it);
    returns a sentence for each that could not be, saying how much and where it is kept."""
    if spill is None:
        return []
    notes = []
    try:
        files = sorted(spill.iterdir())
    except OSError:
        files = []
    for path in files:
        target = RunDir(run_dir).raw / path.name
        try:
            data = path.read_bytes()
        except OSError as exc:
            notes.append(f"could not read the spilled events {path} ({exc.strerror or exc}); kept there")
            continue
        try:
            _append_whole(target, data)
            path.unlink()
        except OSError as exc:
            whole = _partial_line(target) + data  # the disk may have taken the start of a line
            lines, steps = whole.count(b"\n"), whole.count(b"\nS\t") + whole.startswith(b"S\t")
            notes.append(f"{lines:,} event line(s) ({steps:,} step(s)) of raw/{path.name} could not "
                         f"be written to the run's disk ({exc.strerror or exc}); they are kept in {path}: append "
                         f"them (cat {path} >> {target}) and report again")
    _remove_spill(spill)
    return notes


def _partial_line(path: Path) -> bytes:
    """The unfinished last line of ``path`` (the bytes after its last newline; b"" if none)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 65536))
            tail = f.read()
    except OSError:
        return b""
    cut = tail.rfind(b"\n")
    return tail[cut + 1:] if cut >= 0 or len(tail) < 65536 else b""


def _append_whole(target: Path, data: bytes) -> None:
    """Append all of ``data`` or nothing (a refused write is cut back: the spilled copy stays the one to use)."""
    with open(target, "ab") as f:
        start = f.tell()
        try:
            f.write(data)
            f.flush()
        except OSError:
            f.truncate(start)
            raise


def _remove_spill(spill: Path | None) -> None:
    """Remove the spill directory when nothing is left in it (what is left is named in the run's notes)."""
    if spill is not None:
        try:
            spill.rmdir()
        except OSError:
            pass
