"""Decoding a piece of trace text that may be hostile: every failure becomes one exception type, bytes that
are not UTF-8 are replaced and counted, and an escaped lone surrogate (valid JSON that msgspec refuses) is
repaired in place."""

from __future__ import annotations

import re
from typing import Callable, Protocol, TypeVar, Union

import msgspec

# a piece of trace text: the reader's bytes, or a view into its buffer (decoded in place)
Text = Union[bytes, bytearray, memoryview]
T = TypeVar("T")


class _Counts(Protocol):
    bad_utf8: int


class Undecodable(Exception):
    """A piece of text msgspec cannot decode (syntax, too deep, or still bad after UTF-8 repair)."""


DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, Undecodable)


def decode(fn: Callable[[Text], T], buf: Text, res: _Counts) -> T:
    """``fn(buf)``, turning every way a hostile text can fail into :class:`Undecodable` — except bytes that
    are not UTF-8 (bit flips, raw surrogates, Latin-1 names): those are replaced by U+FFFD and counted."""
    try:
        # msgspec checks UTF-8 only in the strings it keeps; a damaged key it skips ("cat\\x8f") would
        # silently drop a field. Checking the whole text first costs ~0.6 ms per MB; text that is all ASCII
        # (most traces) is valid UTF-8, and saying so takes a quarter of that.
        if not _ascii(buf):
            str(buf, "utf-8")
        return fn(buf)
    except UnicodeDecodeError:
        text = bytes(buf).decode("utf-8", "replace")
        bad = text.count("\ufffd") - bytes(buf).count("\ufffd".encode())
        try:
            out = fn(text.encode())
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            raise Undecodable(str(exc)) from None
        res.bad_utf8 += max(bad, 1)
        return out
    except RecursionError:
        raise Undecodable("nested too deeply") from None
    except msgspec.DecodeError:
        fixed = _lone_surrogates_replaced(buf)
        if fixed is None:
            raise
    try:  # valid JSON that msgspec refuses: an escaped lone surrogate ("\\ud800"), as Python's json writes
        return fn(fixed)
    except RecursionError:
        raise Undecodable("nested too deeply") from None


def _ascii(buf: Text) -> bool:
    """Is ``buf`` (bytes, or a view of a bytearray: then all of it is checked) pure ASCII?"""
    whole = buf.obj if isinstance(buf, memoryview) else buf
    return isinstance(whole, (bytes, bytearray)) and whole.isascii()


_SURROGATE_ESCAPE = re.compile(rb"(\\+)u[dD]([89a-fA-F])[0-9a-fA-F]{2}")


def _lone_surrogates_replaced(buf: Text) -> bytes | None:
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


