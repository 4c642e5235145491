"""Is a run directory still being recorded, finished, or left unfinished by a recorder that died?

Why a lock and not meta.json: readers (``report``, ``compare``, ``fleet``, the live view) must never write a
run, so they cannot "fix" a run they find unfinished — they only need to know which of the three it is, to
read a consistent snapshot of a live run and to say the right sentence for one whose launcher was killed.
The launcher holds an exclusive ``flock`` on ``.recording`` from before the job starts until its last write,
then removes the file. The kernel drops the lock when the launcher dies, however it dies (kill -9
included), so: file locked → recording; file there but unlocked → the launcher died (``gpusleuth finalize``
makes such a run final); no file → finished (or recorded before this existed: then ``meta.json``'s end says).
Testing the lock opens the file read-only and changes nothing.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from gpusleuth.run.layout import RECORDING_LOCK, RunDir

RECORDING = "recording"
UNFINISHED = "unfinished"  # its launcher died before the run's end was written
FINISHED = "finished"


def hold_recording_lock(run_dir: "os.PathLike[str] | str") -> int | None:
    """Take the lock for the launcher's lifetime; the fd to pass to :func:`release_recording_lock`.
    Made under another name and renamed, so no reader ever sees the file unlocked while we live."""
    lock = RunDir(Path(run_dir)).recording_lock
    tmp = lock.with_name(RECORDING_LOCK + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    except OSError:
        return None  # a disk without room for an inode: readers fall back on meta.json's end
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.replace(tmp, lock)
    except OSError:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        return None
    return fd


def release_recording_lock(run_dir: "os.PathLike[str] | str", fd: int | None) -> None:
    """The run is final: remove the lock file, then let go of the lock."""
    if fd is None:
        return
    try:
        RunDir(Path(run_dir)).recording_lock.unlink(missing_ok=True)
    except OSError:
        pass
    os.close(fd)


def recording_state(run_dir: "os.PathLike[str] | str", end_ns: int | None) -> str:
    """``RECORDING``, ``UNFINISHED`` or ``FINISHED`` (``end_ns``: meta.json's end, None when unwritten)."""
    try:
        fd = os.open(RunDir(Path(run_dir)).recording_lock, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return FINISHED if end_ns is not None else UNFINISHED
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return RECORDING
    except OSError:
        return FINISHED if end_ns is not None else UNFINISHED
    finally:
        os.close(fd)  # closing drops a shared lock we may have got
    return UNFINISHED
