"""Salvage of a damaged or cut-off events array: every complete event is kept, the rest counted as lost."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

from .result import ReadResult
from .schema import Tail, decode_events, decode_tail
from .textdecode import DECODE_ERRORS, decode

if TYPE_CHECKING:
    from .schema import Chunk

BOUNDARY = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")  # "}" "," "{": a candidate cut between two events
_PH = b'"ph"'


def decode_event_text(text: bytes, res: ReadResult) -> Chunk:
    return decode(decode_events, b"[" + text + b"]", res)


def salvage(text: bytes, sink: Callable[[Chunk], None], res: ReadResult, final: bool) -> Tail | None:
    """Decode every complete event of ``text`` piece by piece; count what cannot be read.

    With ``final`` the last piece may hold the array's end and the trailing metadata.
    """
    cuts = [m.start() + 1 for m in BOUNDARY.finditer(text)]
    starts = [0] + [text.find(b"{", c) for c in cuts]  # piece i = text[starts[i]:ends[i]]
    ends = cuts + [len(text)]
    pieces = list(zip(starts, ends))
    tail = None
    if final and pieces:
        s, e = pieces[-1]
        try:
            tail = decode(decode_tail, b'{"traceEvents":[' + text[s:e], res)
            sink(tail.traceEvents)
            pieces = pieces[:-1]
        except DECODE_ERRORS:
            pass

    def solve(lo: int, hi: int) -> None:
        if lo >= hi:
            return
        s, e = pieces[lo][0], pieces[hi - 1][1]
        try:
            sink(decode_event_text(text[s:e], res))
            return
        except DECODE_ERRORS:
            if hi - lo == 1:
                res.lost_bytes += e - s
                res.lost_events_estimate += max(1, text.count(_PH, s, e))
                return
        mid = (lo + hi) // 2
        solve(lo, mid)
        solve(mid, hi)

    solve(0, len(pieces))
    return tail


