"""Stream a Kineto trace file into decoded event chunks, salvaging truncated or damaged files.

Why streaming: a large trace is hundreds of MB of JSON. Holding the whole text *and* a Python object per
event is what makes HTA need ~5× the file size in RAM. We read (and gunzip) the file in blocks, cut the
``traceEvents`` array at event boundaries and decode a few MB at a time, so peak memory is one chunk of
text and its events plus the growing numpy columns.

Event boundaries: Kineto (and ``json.dump(indent=…)``) write one event per block of lines, separated by
``},\\n  {``. A raw newline can never occur inside a JSON string, so ``}`` ``,`` *newline* ``{`` is always
between values; it may (rarely) be between two objects nested inside one event's ``args``, in which case
decoding that chunk fails and we simply wait for more text before cutting again. Single-line traces have
no such boundaries and are decoded in one piece at the end.

Truncation (a crashed job's trace): whatever cannot be decoded at the end is split at every boundary and
decoded piece by piece (halving on failure), so every complete event is kept and the lost bytes/events are
counted for ``run.losses``.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import msgspec

from gpusleuth.errors import InputError

from .schema import HEAD_DECODER, Head, Tail, decode_events, decode_tail

BLOCK = 1 << 20  # bytes read from disk / decompressed per step
CHUNK = 1 << 20  # decode once this much array text is buffered (1 MB: ~20 MB less peak RSS than 4 MB,
#                  no measurable cost in time)
_BOUNDARY = re.compile(rb"\}[ \t]*,[ \t]*\r?\n[ \t\r\n]*\{")
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
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


def _blocks(path: Path, progress: Progress | None, res: ReadResult) -> Iterator[bytes]:
    """Yield decompressed text blocks. gzip is detected by magic bytes, not by the file name."""
    total = path.stat().st_size
    done = 0
    with open(path, "rb") as f:
        first = f.read(BLOCK)
        done += len(first)
        if progress:
            progress(done, total)
        if not first:
            raise InputError(path, "the file is empty (expected a PyTorch profiler / Kineto JSON trace)")
        if first[:2] != b"\x1f\x8b":
            yield first
            while block := f.read(BLOCK):
                done += len(block)
                if progress:
                    progress(done, total)
                yield block
            return
        dec = zlib.decompressobj(wbits=31)
        pending = first
        while True:
            try:
                # max_length keeps each decompressed block small (gzip ratios of 15-20x are common)
                out = dec.decompress(pending, BLOCK)
            except zlib.error as exc:
                res.truncated = True
                res.notes.append(f"the gzip stream is damaged after {done:,} compressed bytes ({exc})")
                return
            pending = dec.unconsumed_tail
            if out:
                yield out
            if dec.eof:
                rest = dec.unused_data + f.read()
                if rest.strip(b"\x00"):  # concatenated gzip members
                    dec = zlib.decompressobj(wbits=31)
                    pending = rest
                    continue
                return
            if pending or out:
                continue
            pending = f.read(BLOCK)
            if not pending:
                res.truncated = True
                res.notes.append("the gzip stream ends early (file cut off)")
                return
            done += len(pending)
            if progress:
                progress(done, total)


def _decode_events(text: bytes) -> list:
    return decode_events(b"[" + text + b"]")


def _last_boundary(buf: bytes | bytearray, lo: int) -> re.Match | None:
    """Last event boundary at or after ``lo`` (searching a small window first: it is almost always near)."""
    for start in (max(lo, len(buf) - (256 << 10)), lo):
        last = None
        for last in _BOUNDARY.finditer(buf, start):
            pass
        if last is not None:
            return last
    return None


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
            tail = decode_tail(b'{"traceEvents":[' + text[s:e])
            sink(tail.traceEvents)
            pieces = pieces[:-1]
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass

    def solve(lo: int, hi: int) -> None:
        if lo >= hi:
            return
        s, e = pieces[lo][0], pieces[hi - 1][1]
        try:
            sink(_decode_events(text[s:e]))
            return
        except (msgspec.DecodeError, msgspec.ValidationError):
            if hi - lo == 1:
                res.lost_bytes += e - s
                res.lost_events_estimate += max(1, text.count(_PH, s, e))
                return
        mid = (lo + hi) // 2
        solve(lo, mid)
        solve(mid, hi)

    solve(0, len(pieces))
    return tail


def read_events(path: Path, sink: Callable[[list], None], progress: Progress | None = None) -> ReadResult:
    """Stream ``path``; call ``sink`` with each decoded chunk of events; return metadata and losses."""
    res = ReadResult()
    buf = bytearray()
    blocks = _blocks(path, progress, res)
    bare_array = False
    # --- header: find the start of the traceEvents array ------------------------------------
    for block in blocks:
        buf += block
        res.total_text_bytes += len(block)
        stripped = buf.lstrip()
        if stripped[:1] == b"[":
            bare_array = True
            del buf[: len(buf) - len(stripped)]  # keep the "[" as the frame byte
            break
        if stripped and stripped[:1] != b"{":
            raise InputError(path, "not JSON (expected a PyTorch profiler / Kineto Chrome-trace JSON object)")
        m = _EVENTS_KEY.search(buf)
        if m:
            header = bytes(buf[: m.end()])
            try:
                res.head = HEAD_DECODER.decode(header + b"]}")
            except (msgspec.DecodeError, msgspec.ValidationError):
                res.notes.append("the metadata before traceEvents could not be read")
            del buf[: m.end() - 1]  # keep the "[" as the frame byte
            break
    else:
        _not_a_trace(path, bytes(buf), res)
    # Invariant from here on: buf[0] is a spare byte just before the next event ("[" or whitespace).
    # Each chunk is decoded in place by writing "[" there and "]" just after the chunk's last "}" —
    # no copy of the text is made.
    # --- body: decode chunk by chunk -------------------------------------------------------
    hold_until = CHUNK
    for block in blocks:
        buf += block
        res.total_text_bytes += len(block)
        if len(buf) < hold_until:
            continue
        m = _last_boundary(buf, 0)
        if m is None:
            hold_until = len(buf) + CHUNK
            continue
        cut = m.start() + 1
        first, after = buf[0], buf[cut]
        buf[0], buf[cut] = 0x5B, 0x5D  # "[" … "]"
        try:
            with memoryview(buf) as mv, mv[: cut + 1] as part:
                events = decode_events(part)
        except (msgspec.DecodeError, msgspec.ValidationError):
            buf[0], buf[cut] = first, after
            # a boundary inside nested args, or damage: wait for more text and retry with a larger chunk
            hold_until = len(buf) + CHUNK
            if len(buf) > 16 * CHUNK:  # persistent damage: salvage this part and move on
                _salvage(bytes(buf[1:cut]), sink, res, final=False)
                del buf[: m.end() - 2]
                hold_until = CHUNK
            continue
        sink(events)
        del events
        del buf[: m.end() - 2]
        hold_until = CHUNK
    # --- end: last events + trailing metadata -------------------------------------------------
    if buf:
        buf[0] = 0x5B
    text = bytes(buf)
    del buf
    try:
        if bare_array:
            sink(decode_events(text))
        else:
            res.tail = decode_tail(b'{"traceEvents":' + text)
            sink(res.tail.traceEvents)
            res.tail.traceEvents = []
        return res
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    res.truncated = True
    tail = _salvage(text[1:], sink, res, final=not bare_array)
    if tail is not None:
        tail.traceEvents = []
        res.tail = tail
    return res


def _not_a_trace(path: Path, text: bytes, res: ReadResult) -> None:
    """No ``traceEvents`` array anywhere: say precisely what the file is instead."""
    if not text.strip():
        raise InputError(path, "the file is empty (expected a PyTorch profiler / Kineto JSON trace)")
    try:
        doc = msgspec.json.decode(text)
    except msgspec.DecodeError:
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
