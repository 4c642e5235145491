"""A trace file's text, block by block, whatever it is compressed with — the one place that knows containers.

The container (gzip, bzip2, xz, zstd, zip) is detected by magic bytes, not by the file name; a damaged or
cut-off stream yields everything before the damage and says so in ``StreamLosses``. The trace reader
(``reader.py``) and the Perfetto annotation (which copies the user's trace) both read through
:func:`text_blocks`, so every compression one of them reads, the other reads too.
"""

from __future__ import annotations

import queue
import threading
import zlib
from dataclasses import dataclass, field
from lzma import LZMAError as _LZMAError
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, Generator, Protocol, Union

from gpusleuth.errors import InputError
from gpusleuth.run.files import open_regular as _open_regular

BLOCK = 1 << 20  # bytes read from disk / decompressed per step

# zlib-ng's inflate, behind zlib's own interface (``copy()`` included, which the damage salvage below needs): 0.26 s
# of CPU where zlib takes 0.41 for a 340 MB trace, 0.32 vs 0.49 for a 330 MB one (BENCHMARKS.md, issue 36) — a
# 147 KB wheel without dependencies. Where it cannot be installed, zlib reads the same files. (The type check
# sees zlib's interface: zlib-ng's stubs leave out ``copy`` and ``error``, which it has.)
if TYPE_CHECKING:
    _inflate = zlib
else:
    try:
        from zlib_ng import zlib_ng as _inflate
    except ImportError:  # a platform without its wheel
        _inflate = zlib

Progress = Callable[[int, int], None]
# what the readers below yield: text blocks; generators, so that a reader that stops early can close them
Blocks = Generator[bytes, None, None]


class _Decompressor(Protocol):
    """bz2's and lzma's decompressors (the same interface)."""

    @property
    def eof(self) -> bool: ...

    @property
    def needs_input(self) -> bool: ...

    def decompress(self, data: bytes, max_length: int = -1) -> bytes: ...


@dataclass
class StreamLosses:
    """What reading the container lost: a cut-off or damaged stream, and the sentences that say so."""

    truncated: bool = False
    notes: list[str] = field(default_factory=list)


def text_blocks(path: Path, progress: Progress | None = None,
                res: StreamLosses | None = None) -> Blocks:
    """The decompressed text of ``path`` in blocks of about ``BLOCK`` bytes (see :func:`_blocks`)."""
    return _blocks(Path(path), progress, res if res is not None else StreamLosses())


class _End:
    """The helper's last word: the stream is done."""


_END = _End()
# what the helper hands over: a block with the progress seen when it was read, the end, or what it raised
_Handed = Union[tuple[bytes, Union[tuple[int, int], None]], _End, BaseException]


def text_blocks_ahead(path: Path, progress: Progress | None = None, res: StreamLosses | None = None,
                      depth: int = 2) -> Blocks:
    """:func:`text_blocks`, decompressed on a helper thread up to ``depth`` blocks ahead of the caller.

    zlib, bz2, lzma and pyarrow's zstd inflate with the GIL released, so where a second core is free the
    file is decompressed while the caller parses the blocks before (a third of reading a gzip trace). What
    the caller sees is what :func:`text_blocks` gives, in the same order: the blocks, then the container's
    losses (merged into ``res`` when the stream ends, where the plain generator would have added them), and
    any exception raised where the plain generator would raise it. The helper stops within 50 ms once the
    caller stops reading (an error, a closed generator), so it never outlives the read."""
    res = res if res is not None else StreamLosses()
    own = StreamLosses()
    q: queue.Queue[_Handed] = queue.Queue(depth)
    stop = threading.Event()
    seen: list[tuple[int, int] | None] = [None]

    def note(done: int, total: int) -> None:
        seen[0] = (done, total)

    def put(item: _Handed) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        gen = _blocks(Path(path), note if progress is not None else None, own)
        try:
            for block in gen:
                if not put((block, seen[0])):
                    return
            put(_END)
        except BaseException as exc:  # handed to the caller, raised there  # noqa: BLE001
            put(exc)
        finally:
            gen.close()

    helper = threading.Thread(target=work, name="gpusleuth-inflate", daemon=True)
    helper.start()
    try:
        while True:
            try:
                item = q.get(timeout=0.5)
            except queue.Empty:
                if helper.is_alive() or not q.empty():
                    continue
                raise RuntimeError("the decompressing thread ended without a word") from None
            if isinstance(item, _End):
                break
            if isinstance(item, BaseException):
                raise item
            block, done = item
            if progress is not None and done is not None:
                progress(*done)
            yield block
        res.truncated = res.truncated or own.truncated
        res.notes.extend(own.notes)
    finally:
        stop.set()


def _blocks(path: Path, progress: Progress | None, res: StreamLosses) -> Blocks:
    """Yield decompressed text blocks. The container (gzip, bzip2, xz, zstd, zip) is detected by magic
    bytes, not by the file name; a damaged stream yields everything before the damage."""
    total = path.stat().st_size
    with open_regular(path) as f:
        state = {"done": 0}

        def read(n: int = BLOCK) -> bytes:
            try:
                data: bytes = f.read(n)
            except OSError as exc:
                raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
            state["done"] += len(data)
            if progress:
                progress(min(state["done"], total), total)
            return data

        first = read()
        if not first:
            raise InputError(path, "the file is empty (expected a PyTorch profiler / Kineto JSON trace)")
        if first[:2] == b"\x1f\x8b":
            yield from _gunzip(first, read, res)
        elif first[:3] == b"BZh" or first[:6] == b"\xfd7zXZ\x00":
            import bz2
            import lzma

            dec = bz2.BZ2Decompressor() if first[:3] == b"BZh" else lzma.LZMADecompressor()
            yield from _stream_decompress(dec, first, read, res, "bzip2" if first[:3] == b"BZh" else "xz")
        elif first[:4] == b"\x28\xb5\x2f\xfd":
            yield from _unzstd(path, res)
        elif first[:4] == b"PK\x03\x04":
            yield from _unzip(path, res)
        else:
            yield first
            while block := read():
                if len(block) >= BLOCK and not block.strip(b"\x00"):  # a preallocated tail never written
                    res.notes.append(f"the file holds only zero bytes from about {state['done'] - len(block):,} "
                                     f"of its {total:,} bytes on (space reserved but never written); the rest "
                                     "was not read")
                    return
                yield block


def open_regular(path: Path) -> IO[bytes]:
    """The trace file, opened only if it is a regular file (a FIFO would block forever, a device never
    ends); anything else is one sentence."""
    return _open_regular(path, "a trace file (give the trace files themselves)")


def _damaged(res: StreamLosses, what: str, at: int, exc: Exception) -> None:
    res.truncated = True
    res.notes.append(f"the {what} stream is damaged after {at:,} bytes of text ({exc}); "
                     "the events before the damage were kept")


def _gunzip(first: bytes, read: Callable[..., bytes], res: StreamLosses) -> Blocks:
    """Inflate gzip member by member. On damage, inflate the failing input again in small pieces from a
    copy of the decompressor taken before it, so every byte before the damage is still returned."""
    dec = _inflate.decompressobj(wbits=31)
    pending = first
    produced = 0
    while True:
        saved = dec.copy()
        try:
            # max_length keeps each decompressed block small (gzip ratios of 15-20x are common)
            out = dec.decompress(pending, BLOCK)
        except _inflate.error as exc:
            rest = bytearray()
            for i in range(0, len(pending), 256):
                before = saved.copy()
                try:
                    rest += saved.decompress(pending[i:i + 256])
                except _inflate.error:  # the damage is in these 256 bytes: take them one at a time
                    for j in range(i, min(i + 256, len(pending))):
                        try:
                            rest += before.decompress(pending[j:j + 1])
                        except _inflate.error:
                            break
                    break
            if rest:
                yield bytes(rest)
            _damaged(res, "gzip", produced + len(rest), exc)
            return
        pending = dec.unconsumed_tail
        produced += len(out)
        if out:
            yield out
        if dec.eof:
            after = dec.unused_data + read(-1)
            if after.strip(b"\x00"):  # concatenated gzip members
                dec = _inflate.decompressobj(wbits=31)
                pending = after
                continue
            return
        if pending or out:
            continue
        pending = read()
        if not pending:
            res.truncated = True
            res.notes.append("the gzip stream ends early (file cut off)")
            return


def _stream_decompress(dec: _Decompressor, first: bytes, read: Callable[..., bytes], res: StreamLosses,
                       what: str) -> Blocks:
    """bz2/lzma decompressors (same interface): bounded output per call, damage kept as a loss."""
    data = first
    produced = 0
    while True:
        try:
            out = dec.decompress(data, BLOCK)
        except (OSError, EOFError, ValueError, _LZMAError) as exc:  # LZMAError is a bare Exception
            _damaged(res, what, produced, exc)
            return
        produced += len(out)
        if out:
            yield out
        if dec.eof:
            return
        data = b"" if not dec.needs_input else read()
        if dec.needs_input and not data:
            res.truncated = True
            res.notes.append(f"the {what} stream ends early (file cut off)")
            return


def _unzstd(path: Path, res: StreamLosses) -> Blocks:
    """zstd through pyarrow's codec (already a dependency), streamed."""
    import pyarrow as pa

    produced = 0
    try:
        with pa.input_stream(str(path), compression="zstd") as stream:
            while block := stream.read(BLOCK):
                produced += len(block)
                yield block
    except (OSError, ValueError, pa.ArrowException) as exc:
        _damaged(res, "zstd", produced, exc)


def _unzip(path: Path, res: StreamLosses) -> Blocks:
    """A zip archive holding one trace: stream its (largest) .json member."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            members = [i for i in z.infolist() if not i.is_dir()]
            jsons = [i for i in members if i.filename.endswith((".json", ".json.gz"))] or members
            if not jsons:
                raise InputError(path, "a zip archive with no files in it")
            member = max(jsons, key=lambda i: i.file_size)
            if len(jsons) > 1:
                res.notes.append(f"the zip archive holds {len(jsons)} traces; read only the largest, "
                                 f"{member.filename} (unzip it to report on each rank)")
            with z.open(member) as f:
                produced = 0
                try:
                    while block := f.read(BLOCK):
                        produced += len(block)
                        yield block
                except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as exc:
                    _damaged(res, "zip", produced, exc)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
        raise InputError(path, f"a damaged or unsupported zip archive ({exc})") from None


