"""The JSON structure of a trace walked as the text arrives: the top-level ``traceEvents`` key, and the true
boundary between two events when the fast boundary pattern cannot find one."""

from __future__ import annotations

import re
from typing import Iterator

import msgspec

_AFTER_KEY = re.compile(rb'\s*:\s*\[')  # after the top-level "traceEvents" key
_WS_COMMA_WS = re.compile(rb"[ \t\r\n]*,[ \t\r\n]*")
_STRUCT = re.compile(rb'["\[\]{}]')


class Structure:
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

    def _string_end(self, buf: bytes | bytearray) -> int | None:
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

    def tokens(self, buf: bytes | bytearray) -> Iterator[tuple[int, int, int]]:
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


def find_events_key(buf: bytes | bytearray, scan: Structure) -> int | None:
    """Offset just after the ``[`` of the *top-level* ``"traceEvents": [`` in ``buf`` (None: not yet).

    Strings and nesting are tracked (:class:`Structure`), so a key of the same name inside an inner object,
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
        return msgspec.json.decode(token, type=str)
    except (msgspec.DecodeError, UnicodeDecodeError):  # (ValidationError is a DecodeError)
        return None


class Walk:
    """The events array walked as JSON (:class:`Structure`) from the spare byte at ``buf[0]``; remembers the
    last place where an event ends at the array's own level and the next one begins. Only used when the
    fast boundary pattern fails, so its per-token Python cost is paid on the odd event alone."""

    def __init__(self) -> None:
        self.structure = Structure(pos=1)
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
