"""Stream a Kineto trace file into decoded event chunks, salvaging truncated or damaged files.

Why streaming: a large trace is hundreds of MB of JSON. Holding the whole text *and* a Python object per
event is what makes HTA need ~5× the file size in RAM. We read (and gunzip) the file in blocks, cut the
``traceEvents`` array at event boundaries and decode a few MB at a time, so peak memory is one chunk of
text and its events plus the growing numpy columns.

Event boundaries: ``}`` ``,`` ``{`` with any whitespace between — ``},\\n  {`` in Kineto's and
``json.dump(indent=…)``'s layouts, ``}, {`` in a one-line ``json.dump(obj, f)``. Such a triple can also sit
inside a string or between two objects nested in one event's ``args``; a cut there never decodes (the
chunk ends inside a string or an unclosed object), so the previous few candidates are tried; if none
decodes (one event bigger than a chunk, full of such triples), the array is walked as JSON (``structure.Walk``:
strings skipped whole, brackets counted) to the last true boundary. Each byte is searched for boundaries
once and walked at most once, so reading is linear in the file's size whatever its layout or its oddest
event. The array is the *top-level* ``traceEvents`` (the same walker skips strings and inner objects, and
reads an escaped spelling of the key).

Truncation (a crashed job's trace): whatever cannot be decoded at the end is split at every boundary and
decoded piece by piece (halving on failure), so every complete event is kept and the lost bytes/events are
counted for ``run.losses``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import msgspec

from gpusleuth.errors import InputError

from .decompress import Blocks, Progress, open_regular, text_blocks, text_blocks_ahead
from .result import ReadResult
from .salvage import BOUNDARY, salvage
from .schema import HEAD_DECODER, decode_events, decode_tail
from .structure import Structure, Walk, find_events_key
from .textdecode import DECODE_ERRORS, Text, decode

if TYPE_CHECKING:
    from .schema import Chunk

__all__ = ["CHUNK", "FIRST", "REST", "NotRegular", "ReadResult", "open_regular", "read_events", "read_part"]

CHUNK = 1 << 20  # decode once this much array text is buffered (1 MB: ~20 MB less peak RSS than 4 MB,
#                  no measurable cost in time)


def read_events(path: Path, sink: Callable[[Chunk], None], progress: Progress | None = None) -> ReadResult:
    """Stream ``path``; call ``sink`` with each decoded chunk of events; return metadata and losses."""
    res = ReadResult()
    blocks = (text_blocks_ahead if _worth_a_thread(path) else text_blocks)(path, progress, res)
    try:
        return _read_events(path, blocks, sink, res)
    finally:
        blocks.close()  # stops the decompressing thread now, not when a traceback lets go of it
        if res.bad_utf8:
            res.notes.append(f"{res.bad_utf8:,} byte sequence(s) that are not UTF-8 (damage or another "
                             "encoding) were replaced by \ufffd in names")


class NotRegular(Exception):
    """A part of a split read (:func:`read_part`) met something the whole-file reader handles by looking at
    more than its part: damage, a cut-off end, salvage, one event too odd for the boundary pattern, bytes
    that are not UTF-8, a header reaching the split point. The caller reads the whole file instead."""


FIRST, REST = "first", "rest"  # the two parts of a split read


def read_part(path: Path, sink: Callable[[Chunk], None], split: int, side: str,
              progress: Progress | None = None, ahead: bool = False) -> ReadResult:
    """One part of a file read by two processes (``split.py``): the events before (``FIRST``) or from
    (``REST``) the first event boundary at or after text offset ``split`` — the first match of the boundary
    pattern in the text from ``split`` on, the same place for both sides, which find it independently.

    ``FIRST`` decodes the text up to that boundary and checks that the last piece decodes (a cut inside a
    string or an event never does, so both parts hold whole events); ``REST`` inflates and discards the text
    before it and reads the rest as :func:`read_events` would, the trailing metadata included. Raises
    :class:`NotRegular` for anything that is not a clean read: together the two parts are then exactly what
    :func:`read_events` gives, and for everything else the caller reads the file whole. ``ahead``: decompress
    on a helper thread (where a core beyond the two parts' is free)."""
    res = ReadResult()
    blocks = (text_blocks_ahead if ahead else text_blocks)(path, progress, res)
    try:
        _read_events(path, blocks, sink, res, split, side)
    finally:
        blocks.close()
    if res.truncated or res.notes or res.bad_utf8 or res.lost_bytes:
        raise NotRegular("damage, a cut-off end or text that is not UTF-8")
    return res


AHEAD_MIN_BYTES = 8 << 20  # files smaller than this are decompressed in line (see _worth_a_thread)


def _worth_a_thread(path: Path) -> bool:
    """Decompress on a helper thread only where it can pay: a file of at least ``AHEAD_MIN_BYTES`` on disk
    (8 MB of gzip is ~0.15 s of inflate) and a second CPU this process may run on. Below that the blocks in
    flight (a few MB) would show in a small trace's peak memory for a gain of milliseconds."""
    try:
        big = path.stat().st_size >= AHEAD_MIN_BYTES
    except OSError:
        return False  # the plain reader says what is wrong with the path
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return big and cpus > 1


def _read_events(path: Path, blocks: Blocks, sink: Callable[[Chunk], None], res: ReadResult,
                 split: int | None = None, side: str = FIRST) -> ReadResult:
    buf = bytearray()
    bare_array = False
    scan = Structure()
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
        end = find_events_key(buf, scan)
        if end is not None:
            header = bytes(buf[:end])
            try:
                res.head = decode(HEAD_DECODER.decode, header + b"]}", res)
            except DECODE_ERRORS:
                res.notes.append("the metadata before traceEvents could not be read")
            del buf[: end - 1]  # keep the "[" as the frame byte
            break
    else:
        _not_a_trace(path, bytes(buf), res)
    # Invariant from here on: buf[0] is a spare byte just before the next event ("[" or whitespace).
    # Each chunk is decoded in place by writing "[" there and "]" just after the chunk's last "}" —
    # no copy of the text is made.
    found: list[int] = []
    if split is not None:  # one part of a split read (read_part)
        at = split - (res.total_text_bytes - len(buf))  # the split point's place in buf (maybe past its end)
        if at < 1:
            raise NotRegular("the split point is in the header")
        if side == REST:
            buf = _skip_to_boundary(buf, blocks, at, res)
        else:
            if at < len(buf):  # the text after it goes through the boundary search below, as the next block
                rest = bytes(buf[at:])
                del buf[at:]
                res.total_text_bytes -= len(rest)
                blocks = _prepend(rest, blocks)
            blocks = _until_boundary(blocks, split - res.total_text_bytes, found)
    # --- body: decode chunk by chunk -------------------------------------------------------
    # Every boundary candidate is searched for once (``searched`` only moves forward), so reading is
    # linear in the file's size whatever its layout: one event per line, pretty-printed or compact.
    searched = 0
    candidates: list[tuple[int, int]] = []  # (cut, next event's start) of boundaries not yet used
    hold_until = CHUNK
    walk: Walk | None = None  # set while one event is too big or too odd for the boundary pattern
    for block in blocks:
        buf += block
        res.total_text_bytes += len(block)
        if len(buf) < hold_until:
            continue
        for cut, nxt in _last_boundaries(buf, max(searched - 64, 0), KEEP):
            if not candidates or cut > candidates[-1][0]:
                candidates.append((cut, nxt))
        del candidates[:-KEEP]
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
                if split is not None:
                    raise NotRegular("one event too odd for the boundary pattern")
                cut, nxt = walk.boundary
                if not _decode_in_place(buf, cut, sink, res):  # real damage between two true boundaries
                    salvage(bytes(buf[1:cut]), sink, res, final=False)
                done = nxt
        if done is not None:
            del buf[: done - 1]
            searched -= done - 1
            candidates = [(c - done + 1, n - done + 1) for c, n in candidates if c >= done]
            hold_until = CHUNK
            walk = None
            continue
        if walk is None:
            if split is not None:
                raise NotRegular("one event too odd for the boundary pattern")
            walk = Walk()
            walk.advance(buf)
            if walk.boundary is not None:  # retry at once with the true boundary
                hold_until = len(buf)
                continue
        hold_until = len(buf) + CHUNK
        if len(buf) > WALK_LIMIT and candidates:  # damage, not one big event: salvage it, move on
            if split is not None:
                raise NotRegular("damage")
            cut, nxt = candidates[-1]
            salvage(bytes(buf[1:cut]), sink, res, final=False)
            del buf[: nxt - 1]
            searched -= nxt - 1
            candidates = []
            hold_until = CHUNK
            walk = None
    # --- end: last events + trailing metadata -------------------------------------------------
    if split is not None and side == FIRST:  # the part ends at the boundary: its last events must decode
        if not found:
            raise NotRegular("no event boundary after the split point")
        buf += b"]"
        if not _decode_in_place(buf, len(buf) - 1, sink, res):
            raise NotRegular("the events before the split point do not decode")
        return res
    if buf:
        buf[0] = 0x5B
    text = bytes(buf).rstrip(b"\x00")  # zero bytes after the JSON: a preallocated file's tail
    del buf
    try:
        if bare_array:
            sink(decode(decode_events, text, res))
        else:
            res.tail = decode(decode_tail, b'{"traceEvents":' + text, res)
            sink(res.tail.traceEvents)
            res.tail.traceEvents = []
        return res
    except DECODE_ERRORS:
        pass
    if split is not None:
        raise NotRegular("the end of the trace does not decode")
    res.truncated = True
    tail = salvage(text[1:], sink, res, final=not bare_array)
    if tail is not None:
        tail.traceEvents = []
        res.tail = tail
    return res


SPLIT_SEARCH = 4 << 20  # a split read finds a boundary within this much text after the split point, or stops


def _prepend(first: bytes, blocks: Blocks) -> Blocks:
    yield first
    yield from blocks


def _until_boundary(blocks: Blocks, before: int, found: list[int]) -> Blocks:
    """``blocks`` up to and including the ``}`` of the first boundary that begins ``before`` bytes or more into
    them; its offset (relative to the same start) is appended to ``found``. Nothing after it is yielded."""
    pos = 0
    carry = bytearray()  # the text from the split point on, not yet yielded
    for block in blocks:
        if not carry and pos + len(block) <= before:
            pos += len(block)
            yield block
            continue
        if not carry:
            k = max(before - pos, 0)
            if k:
                yield block[:k]
            carry += block[k:]
        else:
            carry += block
        pos += len(block)
        m = BOUNDARY.search(carry)
        if m is not None:
            found.append(before + m.start() + 1)
            yield bytes(carry[: m.start() + 1])
            return
        if len(carry) > SPLIT_SEARCH:
            return


def _skip_to_boundary(buf: bytearray, blocks: Blocks, at: int, res: ReadResult) -> bytearray:
    """The text from the spare byte before the first event after the first boundary at or after ``buf[at]``
    (the text before it is read and dropped): where the ``REST`` part of a split read begins."""
    while True:
        if len(buf) > at:
            del buf[:at]
            at = 0
            m = BOUNDARY.search(buf)
            if m is not None:
                del buf[: m.end() - 2]
                return buf
            if len(buf) > SPLIT_SEARCH:
                raise NotRegular("no event boundary after the split point")
        else:
            at -= len(buf)
            buf.clear()
        block = next(blocks, None)
        if block is None:
            raise NotRegular("the text ends before the split point")
        buf += block
        res.total_text_bytes += len(block)


KEEP = 8  # boundary candidates remembered (the last few are tried: a false one sits inside a string)


def _last_boundaries(buf: bytearray, start: int, n: int) -> list[tuple[int, int]]:
    """The last ``n`` boundary matches of ``buf[start:]`` as ``(cut, next event's start)``, in order.

    Only a window at the end is searched, doubled until it holds ``n`` matches or reaches ``start``: the
    matches that begin inside a window are the last ones of the whole text (a match is ``}`` ws ``,`` ws
    ``{``, so two never overlap), so this is what searching from ``start`` and keeping the last ``n`` gives,
    without a Python step per event (a million events in a 330 MB trace). Each search at most doubles the
    bytes looked at, so reading stays linear."""
    end = len(buf)
    window = 1 << 15
    while True:
        lo = max(start, end - window)
        found = [(m.start() + 1, m.end() - 1) for m in BOUNDARY.finditer(buf, lo)]
        if len(found) >= n or lo == start:
            return found[-n:]
        window *= 4


WALK_LIMIT = 64 * CHUNK  # one event larger than this is taken for damage (the text is salvaged around it)


def _decode_in_place(buf: bytearray, cut: int, sink: Callable[[Chunk], None], res: ReadResult) -> bool:
    """Decode the events of ``buf[1:cut]`` without copying: ``[`` is written over the spare byte at 0 and
    ``]`` at ``cut`` (both restored if the text does not decode)."""
    first, after = buf[0], buf[cut]
    buf[0], buf[cut] = 0x5B, 0x5D  # "[" … "]"
    take_text: Callable[[Text], bool] | None = getattr(sink, "take_text", None)  # a ColumnBuilder's scanner
    try:
        with memoryview(buf) as mv, mv[: cut + 1] as part:
            if take_text is not None and take_text(part):  # read exactly by the compiled scanner
                return True
            events = decode(decode_events, part, res)
    except DECODE_ERRORS:
        buf[0], buf[cut] = first, after
        return False
    sink(events)
    return True


def _not_a_trace(path: Path, text: bytes, res: ReadResult) -> None:
    """No ``traceEvents`` array anywhere: say precisely what the file is instead."""
    if not text.strip() and res.truncated and res.notes:
        raise InputError(path, f"nothing could be read: {res.notes[-1]}")
    if not text.strip():
        raise InputError(path, "the file is empty (expected a PyTorch profiler / Kineto JSON trace)")
    try:
        doc = decode(msgspec.json.decode, text, res)
    except DECODE_ERRORS:
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
