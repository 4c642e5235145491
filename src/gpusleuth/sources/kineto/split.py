"""One big trace read on two cores: this process decodes the events before a split point, a forked child the
events after it, and the child's columns come back as raw numpy buffers through a pipe.

Why: decoding (msgspec) and the column pass hold the GIL, so a thread cannot share them; a second process can.
gzip cannot be entered in the middle, so the child inflates the text before the split point too and drops it
(~0.15 s of a 340 MB trace, on its own core): the split point sits past the middle (``FIRST_SHARE``) so that
both parts end together.

What it gives is exactly what :func:`reader.read_events` gives or nothing: each part is read by the same
reader (``reader.read_part``), which stops with ``NotRegular`` at anything that is not a clean read (damage,
a cut-off end, salvage, bytes that are not UTF-8); a child that fails, dies or says so makes the caller read
the whole file in this process, as it always did. Used only where it can pay (:func:`split_point`): a file of
``SPLIT_MIN_TEXT`` of JSON or more, gzip or plain (whose text size the file states), a second CPU this process
may run on, fork, and not inside a worker process of a pool (a trace set's workers already fill the cores;
its Ray tasks, no multiprocessing children, ask for one process through ``load_trace(two_processes=False)``).
With a third usable CPU this process decompresses on a helper thread (``text_blocks_ahead``), with a fourth
the child does too.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import struct
import sys
from pathlib import Path
from typing import Any

from gpusleuth.errors import InputError

from .columns import ColumnBuilder
from .decompress import Progress
from .reader import FIRST, REST, NotRegular, ReadResult, open_regular, read_part
from .size import json_size

SPLIT_MIN_TEXT = 64 << 20  # JSON bytes: small traces keep one process (a trace set's ranks, the tests); at
#                            68 MB the split still gained 0.57 -> 0.48 s (BENCHMARKS.md, run E)
FIRST_SHARE = 0.56  # the share of the text this process decodes (it does not inflate the rest; the child does
#                     inflate this part, and drops it): both parts then take the same CPU (0.65 / 0.65 s on
#                     340 MB pretty, 0.82 / 0.80 s on 330 MB compact; BENCHMARKS.md, --phases)


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def split_point(path: Path) -> int | None:
    """The text offset to split ``path`` at, or None where one process should read it whole."""
    # Linux only: elsewhere (macOS) system libraries are not fork-safe, which is why multiprocessing spawns there
    if not sys.platform.startswith("linux") or _usable_cpus() < 2 or multiprocessing.parent_process() is not None:
        return None
    try:
        with open_regular(path) as f:
            head = f.read(2)
        if head != b"\x1f\x8b" and head[:1] not in (b"{", b"[", b" ", b"\n", b"\r", b"\t"):
            return None  # bzip2, xz, zstd, zip: the text's size is not stated
        size = json_size(path)
        on_disk = path.stat().st_size
    except (OSError, InputError):
        return None  # the whole-file reader says what is wrong with the path
    # a gzip trailer claiming more than 32× the file is not believed (Kineto's JSON compresses 15-20×; a cut
    # or damaged file's last four bytes are anything): such a file is read whole, not read twice
    return int(size * FIRST_SHARE) if size >= SPLIT_MIN_TEXT and on_disk * 32 >= SPLIT_MIN_TEXT else None


def read_split(path: Path, builder: ColumnBuilder, split: int,
               progress: Progress | None = None) -> ReadResult | None:
    """Read ``path`` into ``builder`` on two processes; None where the caller must read it whole (then
    ``builder`` holds part of the rows: start a new one)."""
    cpus = _usable_cpus()
    try:
        r, w = os.pipe()
    except OSError:  # out of file descriptors: one process reads it
        return None
    try:
        pid = os.fork()
    except OSError:  # no process to spare (EAGAIN, ENOMEM): one process reads it
        os.close(r)
        os.close(w)
        return None
    if pid == 0:  # the child: never returns into the caller's code
        status = 1
        try:
            os.close(r)
            status = _child(path, split, w, cpus >= 4)
        finally:
            os._exit(status)
    os.close(w)
    reaped = False
    try:
        try:
            res = read_part(path, builder, split, FIRST, progress, ahead=cpus >= 3)
        except (NotRegular, InputError):
            return None
        with open(r, "rb", buffering=0, closefd=False) as pipe:
            got = _receive(pipe)
        os.waitpid(pid, 0)
        reaped = True
        if got is None:
            return None
        part, rest = got
        builder.absorb(part)
        res.tail = rest.tail
        res.total_text_bytes = rest.total_text_bytes  # the child read the whole text
        return res
    finally:
        os.close(r)
        if not reaped:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def _child(path: Path, split: int, w: int, ahead: bool) -> int:
    """Read the part after the split point and send it; what went wrong is only "no" (the parent reads the
    file whole and says it)."""
    try:
        builder = ColumnBuilder()
        res = read_part(path, builder, split, REST, ahead=ahead)
        payload: Any = (builder.portable(), res)
    except BaseException:  # noqa: BLE001 - anything: the parent reads the file whole
        payload = None
    _send(w, payload)
    return 0


_SIZE = struct.Struct("<Q")


def _send(fd: int, obj: Any) -> None:
    """``obj`` pickled with its numpy buffers out of band: a count, the sizes, the pickle, then each buffer raw
    (no copy of the columns into the pickle, none out of it in the parent)."""
    bufs: list[pickle.PickleBuffer] = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
    views = [b.raw() for b in bufs]
    sizes = [len(head)] + [v.nbytes for v in views]
    parts: list[bytes | memoryview] = [_SIZE.pack(len(sizes)), b"".join(_SIZE.pack(n) for n in sizes), head, *views]
    with open(fd, "wb", buffering=0) as out:
        for part in parts:
            view = memoryview(part)
            while view:
                view = view[out.write(view):]


def _receive(pipe: Any) -> tuple[dict[str, Any], ReadResult] | None:
    """What :func:`_send` wrote, or None if the child said no or died before it finished."""
    count = _read_exact(pipe, _SIZE.size)
    if count is None:
        return None
    n = _SIZE.unpack(count)[0]
    sizes = _read_exact(pipe, n * _SIZE.size)
    if sizes is None:
        return None
    parts = []
    for (size,) in _SIZE.iter_unpack(sizes):
        part = _read_exact(pipe, size)
        if part is None:
            return None
        parts.append(part)
    got = pickle.loads(parts[0], buffers=parts[1:])
    return got if isinstance(got, tuple) else None


def _read_exact(pipe: Any, n: int) -> bytearray | None:
    out = bytearray(n)
    view = memoryview(out)
    while view:
        k = pipe.readinto(view)
        if not k:
            return None
        view = view[k:]
    return out
