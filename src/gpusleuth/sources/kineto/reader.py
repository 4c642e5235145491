"""Stream a Kineto trace file into decoded event chunks, salvaging truncated or damaged files.

Why streaming: a large trace is hundreds of MB of JSON. Holding the whole text *and* a Python object per
event is what makes HTA need ~5× the file size in RAM. We read (and gunzip) the file in blocks, cut the
``traceEvents`` array at event boundaries and decode a few MB at a time, so peak memory is one chunk of
text and its events plus the growing numpy columns.

Event boundaries: ``}`` ``,`` ``{`` with any whitespace between — ``},\\n  {`` in Kineto's and
``json.dump(indent=…)``'s layouts, ``}, {`` in a one-line ``json.dump(obj, f)``. Such a triple can also sit
inside a string or between two objects nested in one event's ``args``; a cut there never decodes (the
chunk ends inside a string or an unclosed object), so the previous few candidates are tried; if none
decodes (one event bigger than a chunk, full of such triples), the array is walked as JSON (``_Walk``:
strings skipped whole, brackets counted) to the last true boundary. Each byte is searched for boundaries
once and walked at most once, so reading is linear in the file's size whatever its layout or its oddest
event. The array is the *top-level* ``traceEvents`` (the same walker skips strings and inner objects, and
reads an escaped spelling of the key).

Truncation (a crashed job's trace): whatever cannot be decoded at the end is split at every boundary and
decoded piece by piece (halving on failure), so every complete event is kept and the lost bytes/events are
counted for ``run.losses``.
"""

from __future__ import annotations

import re
import zlib
from lzma import LZMAError as _LZMAError
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import msgspec

from gpusleuth.errors import InputError
from gpusleuth.run.files import open_regular as _open_regular

from .schema import HEAD_DECODER, Head, Tail, decode_events, decode_tail

BLOCK = 1 << 20  # bytes read from disk / decompressed per step
CHUNK = 1 << 20  # decode once this much array text is buffered (1 MB: ~20 MB less peak RSS than 4 MB,
#                  no measurable cost in time)
_BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")
_AFTER_KEY = re.compile(rb'\s*:\s*\[')  # after the top-level "traceEvents" key
_PH = b'"ph"'

Progress = Callable[[int, int], None]


@dataclass
class ReadResult:
    """Metadata and bookkeeping of one streamed file (the events themselves go to the sink)."""

    head: Head | None = None
    tail: Tail | None = None
    truncated: bool = False
    lost_bytes: int = 0
    lost_events_estimate: int = 0
    notes: list[str] = field(default_factory=list)
    total_text_bytes: int = 0
    bad_utf8: int = 0


def _blocks(path: Path, progress: Progress | None, res: ReadResult) -> Iterator[bytes]:
    """Yield decompressed text blocks. The container (gzip, bzip2, xz, zstd, zip) is detected by magic
    bytes, not by the file name; a damaged stream yields everything before the damage."""
    total = path.stat().st_size
    with open_regular(path) as f:
        state = {"done": 0}

        def read(n: int = BLOCK) -> bytes:
            try:
                data = f.read(n)
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


def open_regular(path: Path):
    """The trace file, opened only if it is a regular file (a FIFO would block forever, a device never
    ends); anything else is one sentence."""
    return _open_regular(path, "a trace file (give the trace files themselves)")


def _damaged(res: ReadResult, what: str, at: int, exc: Exception) -> None:
    res.truncated = True
    res.notes.append(f"the {what} stream is damaged after {at:,} bytes of text ({exc}); "
                     "the events before the damage were kept")


def _gunzip(first: bytes, read: Callable[..., bytes], res: ReadResult) -> Iterator[bytes]:
    """Inflate gzip member by member. On damage, inflate the failing input again in small pieces from a
    copy of the decompressor taken before it, so every byte before the damage is still returned."""
    dec = zlib.decompressobj(wbits=31)
    pending = first
    produced = 0
    while True:
        saved = dec.copy()
        try:
            # max_length keeps each decompressed block small (gzip ratios of 15-20x are common)
            out = dec.decompress(pending, BLOCK)
        except zlib.error as exc:
            rest = bytearray()
            for i in range(0, len(pending), 256):
                before = saved.copy()
                try:
                    rest += saved.decompress(pending[i:i + 256])
                except zlib.error:  # the damage is in these 256 bytes: take them one at a time
                    for j in range(i, min(i + 256, len(pending))):
                        try:
                            rest += before.decompress(pending[j:j + 1])
                        except zlib.error:
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
            rest = dec.unused_data + read(-1)
            if rest.strip(b"\x00"):  # concatenated gzip members
                dec = zlib.decompressobj(wbits=31)
                pending = rest
                continue
            return
        if pending or out:
            continue
        pending = read()
        if not pending:
            res.truncated = True
            res.notes.append("the gzip stream ends early (file cut off)")
            return


def _stream_decompress(dec, first: bytes, read: Callable[..., bytes], res: ReadResult,
                       what: str) -> Iterator[bytes]:
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


def _unzstd(path: Path, res: ReadResult) -> Iterator[bytes]:
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


def _unzip(path: Path, res: ReadResult) -> Iterator[bytes]:
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


class _Undecodable(Exception):
    """A piece of text msgspec cannot decode (syntax, too deep, or still bad after UTF-8 repair)."""


_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, _Undecodable)


def _decode(fn: Callable, buf, res: ReadResult):
    """``fn(buf)``, turning every way a hostile text can fail into :class:`_Undecodable` — except bytes that
    are not UTF-8 (bit flips, raw surrogates, Latin-1 names): those are replaced by U+FFFD and counted."""
    try:
        # msgspec checks UTF-8 only in the strings it keeps; a damaged key it skips ("cat\\x8f") would
        # silently drop a field. Checking the whole text first costs ~1 ms per MB.
        str(buf, "utf-8")
        return fn(buf)
    except UnicodeDecodeError:
        text = bytes(buf).decode("utf-8", "replace")
        bad = text.count("\ufffd") - bytes(buf).count("\ufffd".encode())
        try:
            out = fn(text.encode())
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            raise _Undecodable(str(exc)) from None
        res.bad_utf8 += max(bad, 1)
        return out
    except RecursionError:
        raise _Undecodable("nested too deeply") from None
    except msgspec.DecodeError:
        fixed = _lone_surrogates_replaced(buf)
        if fixed is None:
            raise
    try:  # valid JSON that msgspec refuses: an escaped lone surrogate ("\\ud800"), as Python's json writes
        return fn(fixed)
    except RecursionError:
        raise _Undecodable("nested too deeply") from None


_SURROGATE_ESCAPE = re.compile(rb"(\\+)u[dD]([89a-fA-F])[0-9a-fA-F]{2}")


def _lone_surrogates_replaced(buf) -> bytes | None:
    """``buf`` with every unpaired ``\\udXXX`` escape written as ``\\ufffd`` (same length, so nothing
    else moves); None if there is none. Only runs on text that already failed to decode."""
    data = bytes(buf)
    if b"\\ud" not in data and b"\\uD" not in data:
        return None
    out = bytearray(data)
    pending_high = None  # position of a high-surrogate escape waiting for its low half
    changed = False
    for m in _SURROGATE_ESCAPE.finditer(data):
        if len(m.group(1)) % 2 == 0:  # "\\\\ud800" is a backslash and the text "ud800"
            continue
        at = m.end(1) - 1
        high = m.group(2) in b"89abAB"
        if pending_high is not None and not high and at == pending_high + 6:
            pending_high = None  # a proper pair
            continue
        if pending_high is not None:
            out[pending_high:pending_high + 6] = b"\\ufffd"
            changed = True
            pending_high = None
        if high:
            pending_high = at
        else:
            out[at:at + 6] = b"\\ufffd"
            changed = True
    if pending_high is not None:
        out[pending_high:pending_high + 6] = b"\\ufffd"
        changed = True
    return bytes(out) if changed else None


def _decode_events(text: bytes, res: ReadResult) -> list:
    return _decode(decode_events, b"[" + text + b"]", res)


def _salvage(text: bytes, sink: Callable[[list], None], res: ReadResult, final: bool) -> Tail | None:
    """Decode every complete event of ``text`` piece by piece; count what cannot be read.

    With ``final`` the last piece may hold the array's end and the trailing metadata.
    """
    cuts = [m.start() + 1 for m in _BOUNDARY.finditer(text)]
    starts = [0] + [text.find(b"{", c) for c in cuts]  # piece i = text[starts[i]:ends[i]]
    ends = cuts + [len(text)]
    pieces = list(zip(starts, ends))
    tail = None
    if final and pieces:
        s, e = pieces[-1]
        try:
            tail = _decode(decode_tail, b'{"traceEvents":[' + text[s:e], res)
            sink(tail.traceEvents)
            pieces = pieces[:-1]
        except _DECODE_ERRORS:
            pass

    def solve(lo: int, hi: int) -> None:
        if lo >= hi:
            return
        s, e = pieces[lo][0], pieces[hi - 1][1]
        try:
            sink(_decode_events(text[s:e], res))
            return
        except _DECODE_ERRORS:
            if hi - lo == 1:
                res.lost_bytes += e - s
                res.lost_events_estimate += max(1, text.count(_PH, s, e))
                return
        mid = (lo + hi) // 2
        solve(lo, mid)
        solve(mid, hi)

    solve(0, len(pieces))
    return tail


_STRUCT = re.compile(rb'["\[\]{}]')


class _Structure:
    """JSON text walked token by token — each string skipped whole with ``bytes.find`` (C speed, escaped
    quotes counted back), each bracket counted — as the text arrives: the position, the nesting depth and
    a string still open at the end of the text carry over to the next call, so every byte is looked at
    once, however long a string or deep a nesting (a regex for whole strings backtracks over an unfinished
    one on every call: quadratic in a 20 MB string)."""

    def __init__(self, pos: int = 0) -> None:
        self.pos = pos
        self.depth = 0
        self.open_string: int | None = None  # start of a string not closed in the text so far
        self.search_from = 0

    def _string_end(self, buf) -> int | None:
        while True:
            k = buf.find(b'"', self.search_from)
            if k < 0:
                self.search_from = len(buf)
                return None
            j = k
            while buf[j - 1] == 0x5C:  # a backslash: odd runs escape the quote
                j -= 1
            if (k - j) % 2 == 0:
                return k + 1
            self.search_from = k + 1

    def tokens(self, buf) -> Iterator[tuple[int, int, int]]:
        """``(first byte, start, end)`` of each string (``"``) and bracket complete in ``buf`` past ``pos``;
        ``depth`` is already updated when a bracket is yielded."""
        i = self.pos
        while True:
            if self.open_string is None:
                m = _STRUCT.search(buf, i)
                if m is None:
                    self.pos = len(buf)
                    return
                start = m.start()
                c = buf[start]
                if c != 0x22:
                    self.depth += 1 if c in (0x7B, 0x5B) else -1
                    i = self.pos = start + 1
                    yield c, start, i
                    continue
                self.open_string, self.search_from = start, start + 1
            end = self._string_end(buf)
            if end is None:
                return
            start, self.open_string = self.open_string, None
            i = self.pos = end
            yield 0x22, start, end


def _find_events_key(buf: bytes | bytearray, scan: _Structure) -> int | None:
    """Offset just after the ``[`` of the *top-level* ``"traceEvents": [`` in ``buf`` (None: not yet).

    Strings and nesting are tracked (:class:`_Structure`), so a key of the same name inside an inner object,
    or inside a string, is never taken for the trace's array, and an escaped spelling of the key is.
    ``scan`` carries the state between calls as more text arrives.
    """
    for c, start, end in scan.tokens(buf):
        if c != 0x22 or scan.depth != 1 or end - start > 256:
            continue
        tok = bytes(buf[start:end])
        if tok == b'"traceEvents"' or b"\\" in tok and _unescaped(tok) == "traceEvents":
            k = _AFTER_KEY.match(buf, end)
            if k is not None:
                return k.end()
            if len(buf) - end < 64 and not buf[end:].strip(b" \t\r\n:"):  # ': [' not read yet
                scan.pos = start  # look at this key again with more text
                return None
    return None


def _unescaped(token: bytes) -> str | None:
    """A JSON string token's value (a key written with escapes, ``"trace\\u0045vents"``, is still the key)."""
    try:
        return msgspec.json.decode(token)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None


def read_events(path: Path, sink: Callable[[list], None], progress: Progress | None = None) -> ReadResult:
    """Stream ``path``; call ``sink`` with each decoded chunk of events; return metadata and losses."""
    res = ReadResult()
    try:
        return _read_events(path, sink, progress, res)
    finally:
        if res.bad_utf8:
            res.notes.append(f"{res.bad_utf8:,} byte sequence(s) that are not UTF-8 (damage or another "
                             "encoding) were replaced by \ufffd in names")


def _read_events(path: Path, sink: Callable[[list], None], progress: Progress | None,
                 res: ReadResult) -> ReadResult:
    buf = bytearray()
    blocks = _blocks(path, progress, res)
    bare_array = False
    scan = _Structure()
    # --- header: find the start of the top-level traceEvents array ----------------------------
    for block in blocks:
        if not res.total_text_bytes:
            if block[:3] == b"\xef\xbb\xbf":  # a UTF-8 byte-order mark
                block = block[3:]
            elif not block.strip(b"\x00"):
                raise InputError(path, "holds only NUL bytes (space reserved for a trace that was never written?)")
            elif block[:2] in (b"\xff\xfe", b"\xfe\xff", b"{\x00", b"\x00{", b"[\x00", b"\x00["):
                raise InputError(path, "is UTF-16 or UTF-32 text; traces are UTF-8 JSON (convert it: "
                                       "iconv -f UTF-16 -t UTF-8)")
        buf += block
        res.total_text_bytes += len(block)
        stripped = buf.lstrip()
        if stripped[:1] == b"[":
            bare_array = True
            del buf[: len(buf) - len(stripped)]  # keep the "[" as the frame byte
            break
        if stripped and stripped[:1] != b"{":
            raise InputError(path, "not JSON (expected a PyTorch profiler / Kineto Chrome-trace JSON object)")
        end = _find_events_key(buf, scan)
        if end is not None:
            header = bytes(buf[:end])
            try:
                res.head = _decode(HEAD_DECODER.decode, header + b"]}", res)
            except _DECODE_ERRORS:
                res.notes.append("the metadata before traceEvents could not be read")
            del buf[: end - 1]  # keep the "[" as the frame byte
            break
    else:
        _not_a_trace(path, bytes(buf), res)
    # Invariant from here on: buf[0] is a spare byte just before the next event ("[" or whitespace).
    # Each chunk is decoded in place by writing "[" there and "]" just after the chunk's last "}" —
    # no copy of the text is made.
    # --- body: decode chunk by chunk -------------------------------------------------------
    # Every boundary candidate is searched for once (``searched`` only moves forward), so reading is
    # linear in the file's size whatever its layout: one event per line, pretty-printed or compact.
    searched = 0
    candidates: list[tuple[int, int]] = []  # (cut, next event's start) of boundaries not yet used
    hold_until = CHUNK
    walk: _Walk | None = None  # set while one event is too big or too odd for the boundary pattern
    for block in blocks:
        buf += block
        res.total_text_bytes += len(block)
        if len(buf) < hold_until:
            continue
        for m in _BOUNDARY.finditer(buf, max(searched - 64, 0)):
            if not candidates or m.start() + 1 > candidates[-1][0]:
                candidates.append((m.start() + 1, m.end() - 1))
        del candidates[:-8]
        searched = len(buf)
        done = None
        if walk is None:
            for cut, nxt in reversed(candidates[-4:]):  # the last few: a false one sits inside a string
                if _decode_in_place(buf, cut, sink, res):
                    done = nxt
                    break
        else:
            # The pattern's cuts all fell inside one event (a 20 MB string full of "}, {", an args object
            # nested a million times): walk the JSON structure instead — each byte once, strings and nesting
            # tracked — to the last event that ends in the text so far.
            walk.advance(buf)
            if walk.boundary is not None:
                cut, nxt = walk.boundary
                if not _decode_in_place(buf, cut, sink, res):  # real damage between two true boundaries
                    _salvage(bytes(buf[1:cut]), sink, res, final=False)
                done = nxt
        if done is not None:
            del buf[: done - 1]
            searched -= done - 1
            candidates = [(c - done + 1, n - done + 1) for c, n in candidates if c >= done]
            hold_until = CHUNK
            walk = None
            continue
        if walk is None:
            walk = _Walk()
            walk.advance(buf)
            if walk.boundary is not None:  # retry at once with the true boundary
                hold_until = len(buf)
                continue
        hold_until = len(buf) + CHUNK
        if len(buf) > WALK_LIMIT and candidates:  # damage, not one big event: salvage it, move on
            cut, nxt = candidates[-1]
            _salvage(bytes(buf[1:cut]), sink, res, final=False)
            del buf[: nxt - 1]
            searched -= nxt - 1
            candidates = []
            hold_until = CHUNK
            walk = None
    # --- end: last events + trailing metadata -------------------------------------------------
    if buf:
        buf[0] = 0x5B
    text = bytes(buf).rstrip(b"\x00")  # zero bytes after the JSON: a preallocated file's tail
    del buf
    try:
        if bare_array:
            sink(_decode(decode_events, text, res))
        else:
            res.tail = _decode(decode_tail, b'{"traceEvents":' + text, res)
            sink(res.tail.traceEvents)
            res.tail.traceEvents = []
        return res
    except _DECODE_ERRORS:
        pass
    res.truncated = True
    tail = _salvage(text[1:], sink, res, final=not bare_array)
    if tail is not None:
        tail.traceEvents = []
        res.tail = tail
    return res


WALK_LIMIT = 64 * CHUNK  # one event larger than this is taken for damage (the text is salvaged around it)
_WS_COMMA_WS = re.compile(rb"[ \t\r\n]*,[ \t\r\n]*")


def _decode_in_place(buf: bytearray, cut: int, sink: Callable[[list], None], res: ReadResult) -> bool:
    """Decode the events of ``buf[1:cut]`` without copying: ``[`` is written over the spare byte at 0 and
    ``]`` at ``cut`` (both restored if the text does not decode)."""
    first, after = buf[0], buf[cut]
    buf[0], buf[cut] = 0x5B, 0x5D  # "[" … "]"
    try:
        with memoryview(buf) as mv, mv[: cut + 1] as part:
            events = _decode(decode_events, part, res)
    except _DECODE_ERRORS:
        buf[0], buf[cut] = first, after
        return False
    sink(events)
    return True


class _Walk:
    """The events array walked as JSON (:class:`_Structure`) from the spare byte at ``buf[0]``; remembers the
    last place where an event ends at the array's own level and the next one begins. Only used when the
    fast boundary pattern fails, so its per-token Python cost is paid on the odd event alone."""

    def __init__(self) -> None:
        self.structure = _Structure(pos=1)
        self.boundary: tuple[int, int] | None = None
        self.ended = False

    def advance(self, buf: bytearray) -> None:
        if self.ended:
            return
        st = self.structure
        for c, _, end in st.tokens(buf):
            if c in (0x5D, 0x7D):  # "]" "}"
                if st.depth < 0:  # the array's own "]": the rest is the trailing metadata
                    self.ended = True
                    return
                if st.depth == 0:
                    sep = _WS_COMMA_WS.match(buf, end)
                    if sep is not None and sep.end() < len(buf):
                        self.boundary = (end, sep.end())

def _not_a_trace(path: Path, text: bytes, res: ReadResult) -> None:
    """No ``traceEvents`` array anywhere: say precisely what the file is instead."""
    if not text.strip() and res.truncated and res.notes:
        raise InputError(path, f"nothing could be read: {res.notes[-1]}")
    if not text.strip():
        raise InputError(path, "the file is empty (expected a PyTorch profiler / Kineto JSON trace)")
    try:
        doc = _decode(msgspec.json.decode, text, res)
    except _DECODE_ERRORS:
        if res.truncated or text.lstrip()[:1] == b"{":
            raise InputError(path, "not valid JSON, and no traceEvents array was found before it ends "
                                   "(expected a PyTorch profiler / Kineto Chrome-trace JSON)") from None
        raise InputError(path, "not JSON (expected a PyTorch profiler / Kineto Chrome-trace JSON)") from None
    kind = type(doc).__name__
    if isinstance(doc, dict):
        keys = ", ".join(list(doc)[:6])
        raise InputError(path, f"JSON object without a 'traceEvents' array (keys: {keys or 'none'}); "
                               "expected a PyTorch profiler / Kineto Chrome trace")
    raise InputError(path, f"JSON {kind} is not a Chrome trace (expected an object with 'traceEvents')")
