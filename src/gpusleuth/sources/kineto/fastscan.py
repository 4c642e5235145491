"""The compiled column scanner (``_scan.c``), where it was built: a chunk of event text straight to columns.

Why: on a big trace, decoding a msgspec struct per event and then reading every struct's fields back in
Python (:class:`columns.ColumnBuilder`) is most of the reader's CPU time (~0.45 s + ~0.45 s per 1.1–1.5 M
events). ``_scan.scan`` reads the chunk's bytes once and returns its complete events' columns directly, with
``cat``/``name``/``pid``/``tid`` as codes into per-chunk tables of raw byte spans (and int64 values for integer
ids). Here only the *distinct* spans are decoded, by msgspec (so every escape, ``\\u0000`` and UTF-8 sequence
is read exactly as the msgspec path reads it), and interned into the builder's own tables: two spellings of
one value share a code, a string ``"1"`` and an integer ``1`` do not. Metadata (``M``) events are few; the
scanner returns their byte spans and each is decoded with the msgspec path's own :class:`schema.MEvent`.

Exact or nothing: the scanner returns None for a chunk holding anything outside the subset it reads exactly
(see ``_scan.c``), and then the chunk goes the msgspec way, unchanged. The module is optional: without a C
compiler it is not built, and with ``GPUSLEUTH_PURE_PYTHON=1`` it is not used; the answers are the same
(tests/test_fastscan.py reads every trace fixture both ways).
"""

from __future__ import annotations

import importlib
import os
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Hashable, Protocol

import msgspec
import numpy as np

from .schema import MEvent

if TYPE_CHECKING:
    from .textdecode import Text


class ColumnSink(Protocol):
    """What the scanner's chunks are added to: :class:`columns.ColumnBuilder` (named by its parts, so that
    this module and the builder's do not import each other)."""

    phases: Counter[str]
    rows: int
    parts: dict[str, list[np.ndarray]]
    tables: dict[str, dict[Hashable, int]]  # cat/name/pid/tid: the builder's tables (a JSON value → its code)
    span_codes: dict[str, dict[bytes | int, int]]  # the same columns: a key the scanner gives → its code

    def take_meta(self, e: MEvent) -> None: ...


def _built() -> Callable[[Text], Any] | None:
    """``_scan.scan``, where the extension was built (``setup.py``)."""
    try:
        ext = importlib.import_module(f"{__package__}._scan")
    except ImportError:  # not built (no compiler at install time): the msgspec path reads every chunk
        return None
    scan: Callable[[Text], Any] = ext.scan
    return scan


_compiled_scan = _built()

PURE_ENV = "GPUSLEUTH_PURE_PYTHON"
_META = msgspec.json.Decoder(MEvent)
_STR = msgspec.json.Decoder(str)
_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)


def scanner() -> Callable[[Text], Any] | None:
    """The compiled scan, or None where it is not built or ``GPUSLEUTH_PURE_PYTHON`` is set (read when a
    builder is made, so a test or a user switches per read; a split read's child inherits it)."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return None
    return _compiled_scan


def take_chunk(builder: ColumnSink, scan: Callable[[Text], Any], text: Text) -> bool:
    """Add the events of ``text`` (a JSON array of events, as the msgspec path would decode it) to
    ``builder`` exactly as ``builder(decode_events(text))`` would; False, with ``builder`` untouched, where
    the scanner declines the chunk (the caller then decodes it with msgspec)."""
    got = scan(text)
    if got is None:
        return False
    nx, nother, ts, dur, corr, stream, device, cat, name, pid, tid, kcat, kname, kpid, ktid, mspans = got
    metas: list[MEvent] = []
    if mspans:
        try:
            for s, e in np.frombuffer(mspans, np.int64).reshape(-1, 2).tolist():
                metas.append(_META.decode(text[s:e]))
        except _ERRORS:  # (a metadata event the msgspec path would refuse: it says so)
            return False
    keyed = (("cat", cat, kcat), ("name", name, kname), ("pid", pid, kpid), ("tid", tid, ktid))
    try:  # every new span decoded before the builder changes
        values = [_new_values(builder, col, keys) for col, _, keys in keyed]
    except _ERRORS:
        return False
    # as ColumnBuilder.__call__, in its order
    if nother:
        builder.phases["other"] += nother
        for m in metas:
            builder.take_meta(m)
    if not nx:
        return True
    builder.phases["X"] += nx
    builder.rows += nx
    p = builder.parts
    p["ts"].append(np.frombuffer(ts, np.float64))
    p["dur"].append(np.frombuffer(dur, np.float64))
    for (col, codes, keys), new in zip(keyed, values):
        p[col].append(_global_codes(builder, col, keys, new)[np.frombuffer(codes, np.int32)])
    p["corr"].append(np.frombuffer(corr, np.int64))
    p["stream"].append(np.frombuffer(stream, np.int64))
    p["device"].append(np.frombuffer(device, np.int64))
    p["itype"].append(np.zeros(nx, np.int32))
    p["icall"].append(np.zeros(nx, np.int32))
    return True


def _new_values(builder: ColumnSink, col: str, keys: list[bytes | int]) -> dict[bytes | int, Any]:
    """The values of the keys the builder has not met before (a string's JSON text decoded by msgspec)."""
    known = builder.span_codes[col]
    return {k: _STR.decode(k) if isinstance(k, bytes) else k for k in keys if k not in known}


def _global_codes(builder: ColumnSink, col: str, keys: list[bytes | int],
                  new: dict[bytes | int, Any]) -> np.ndarray:
    """The builder's code for each of a chunk's distinct keys, the new ones added to its table in first-seen
    order (as ``ColumnBuilder._intern`` adds them: two keys with one value share its code)."""
    known = builder.span_codes[col]
    table = builder.tables[col]
    for k, v in new.items():
        known[k] = table.setdefault(v, len(table))
    return np.fromiter(map(known.__getitem__, keys), np.int32, len(keys))
