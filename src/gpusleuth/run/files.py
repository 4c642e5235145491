"""Open an input file only if it is a regular file: everything else is one sentence, never a hang.

Why: ``open()`` of a named pipe blocks until some process writes to it (forever, for a FIFO nobody feeds),
and a device such as /dev/zero never ends. Any file a user can point gpusleuth at — a trace, or any file
inside a run directory (meta.json, raw/*.tsv, *.arrows, *.parquet) — goes through here first.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO, Any

from gpusleuth.errors import InputError


_PSEUDO = ("/proc/", "/sys/", "/dev/")


def check_regular(path: str | Path, what: str = "a file") -> os.stat_result:
    """``os.stat(path)`` of a regular file, or :class:`InputError` saying what the path is instead."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(path, "is a symbolic link loop") from None
        if exc.errno == errno.ENOENT:
            raise InputError(path, "no such file") from None
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(path, f"is a directory (expected {what})")
    if os.path.realpath(path).startswith(_PSEUDO):  # /proc/kmsg is a "regular file" whose read blocks
        raise InputError(path, f"is a kernel pseudo-file, not {what}")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else
                "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise InputError(path, f"is {kind}, not {what} (save it to a file first)")
    return st


def is_directory(path: str | Path) -> bool:
    """``Path.is_dir()`` that answers False, instead of raising, for a path the system refuses outright
    (a name too long, a permission denied on the way): the reader then says why in a sentence."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def open_regular(path: str | Path, what: str = "a file", mode: str = "rb", **kw: Any) -> IO[Any]:
    """Open ``path`` for reading once :func:`check_regular` passes; unreadable is one sentence too."""
    check_regular(path, what)
    try:
        return open(path, mode, **kw)
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
