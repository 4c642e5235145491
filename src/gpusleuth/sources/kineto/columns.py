"""Turn decoded event chunks into numpy columns, then into one :class:`TraceData`.

Each chunk's events are read field by field with list comprehensions (C-speed attribute access) and
turned into numpy arrays at once; the chunk's Python objects are then dropped. Only complete events
(``ph == "X"``) become rows; process/thread-name metadata is kept in small dicts; flow (``s``/``f``),
instant and counter events are counted and dropped because every analysis here uses the
``correlation`` arg instead of flow arrows.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from gpusleuth.run.model import Table

from .model import TraceData, kind_of_category
from .schema import Event, MEvent, XEvent

_INT_COLS = ("corr", "stream", "device")


def _to_float(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, str):
        try:
            return float(int(v, 0)) if v[:2].lower() == "0x" else float(v)
        except ValueError:
            return math.nan
    return math.nan


def _floats(values: list) -> np.ndarray:
    """float64 array; None and junk become NaN (slow path only when the fast one fails)."""
    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([_to_float(v) for v in values], dtype=np.float64)


def _ints(values: list) -> np.ndarray:
    """int64 array with -1 for missing/unparsable values (ids, streams, byte counts)."""
    f = _floats(values)
    bad = ~np.isfinite(f)
    if bad.any():
        f[bad] = -1
    return f.astype(np.int64)


class ColumnBuilder:
    """The sink :func:`reader.read_events` feeds; accumulates per-chunk arrays."""

    def __init__(self) -> None:
        self.name_ix: dict[Any, int] = {}
        self.cat_ix: dict[Any, int] = {}
        self.pid_ix: dict[Any, int] = {}
        self.tid_ix: dict[Any, int] = {}
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in
                                                   ("ts", "dur", "cat", "name", "pid", "tid", *_INT_COLS)}
        self.phases: Counter = Counter()
        self.process_names: dict[Any, str] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        self.rows = 0

    @staticmethod
    def _intern(table: dict, values: list) -> np.ndarray:
        """Codes for ``values``, adding unseen ones to ``table`` in first-seen order. The per-item work is
        C-level (``map``/``fromiter``/``dict.fromkeys``); only distinct new values see Python code."""
        try:
            try:
                return np.fromiter(map(table.__getitem__, values), np.int32, len(values))
            except KeyError:
                for v in dict.fromkeys(values):
                    if v not in table:
                        table[v] = len(table)
                return np.fromiter(map(table.__getitem__, values), np.int32, len(values))
        except TypeError:  # an unhashable value (list/dict) where a string belongs
            safe = [v if isinstance(v, (str, int, float)) or v is None else str(v) for v in values]
            return ColumnBuilder._intern(table, safe)

    def __call__(self, events: list) -> None:
        # a chunk comes either from the tagged schema (XEvent/MEvent/field-less others) or, when some
        # event had no usable "ph", from the permissive one (Event with a .ph attribute)
        loose = bool(events) and type(events[0]) is Event
        xs = [e for e in events if e.ph == "X"] if loose else [e for e in events if type(e) is XEvent]
        if len(xs) != len(events):
            # flow arrows (s/f) are most of the rest: counted, not kept (correlation ids link CPU and GPU)
            self.phases["other"] += len(events) - len(xs)
            ms = [e for e in events if e.ph == "M"] if loose else [e for e in events if type(e) is MEvent]
            for e in ms:
                if e.args is not None and isinstance(e.args.name, str):
                    if e.name == "process_name":
                        self.process_names[e.pid] = e.args.name
                    elif e.name == "thread_name":
                        self.thread_names[(e.pid, e.tid)] = e.args.name
        if not xs:
            return
        self.phases["X"] += len(xs)
        self.rows += len(xs)
        p = self.parts
        p["ts"].append(_floats([e.ts for e in xs]))
        p["dur"].append(_floats([e.dur for e in xs]))
        p["cat"].append(self._intern(self.cat_ix, [e.cat for e in xs]))
        p["name"].append(self._intern(self.name_ix, [e.name for e in xs]))
        p["pid"].append(self._intern(self.pid_ix, [e.pid for e in xs]))
        p["tid"].append(self._intern(self.tid_ix, [e.tid for e in xs]))
        args = [e.args for e in xs]
        p["corr"].append(_ints([a.correlation if a is not None else None for a in args]))
        p["stream"].append(_ints([a.stream if a is not None else None for a in args]))
        p["device"].append(_ints([a.device if a is not None else None for a in args]))

    def finish(self, base_time_ns: int | None) -> TraceData:
        """Concatenate, convert µs floats to int64 ns relative to the first microsecond, sort by time."""
        cols = {}
        for k in list(self.parts):  # one column at a time, releasing its chunks as we go
            v = self.parts.pop(k)
            cols[k] = np.concatenate(v) if v else np.empty(0, np.float64 if k in ("ts", "dur") else np.int64)
            del v
        dropped: dict[str, int] = {}
        ts_us, dur_us = cols.pop("ts"), cols.pop("dur")
        ok = np.isfinite(ts_us)
        if not ok.all():
            dropped["complete events without a numeric timestamp"] = int((~ok).sum())
        no_dur = ~np.isfinite(dur_us)
        if no_dur.any():
            dropped["complete events without a numeric duration (treated as 0)"] = int((no_dur & ok).sum())
            dur_us = np.where(no_dur, 0.0, dur_us)
        if not ok.all():
            ts_us, dur_us = ts_us[ok], dur_us[ok]
            cols = {k: v[ok] for k, v in cols.items()}
        self.ts_in_ns = bool(base_time_ns is None and len(ts_us) and np.nanmax(ts_us) > 1e17)
        if self.ts_in_ns:
            # Chrome traces are µs by spec (Kineto's ``displayTimeUnit: "ns"`` only flags sub-µs
            # fractions), but a writer that emitted epoch *nanoseconds* gives values ~1.7e18: scale them.
            ts_us, dur_us = ts_us / 1000.0, dur_us / 1000.0
        origin_us = float(math.floor(ts_us.min())) if len(ts_us) else 0.0
        # (ts - origin) is exact in float64 for nearby values; scaling the small offset keeps ns precision
        ts = np.rint((ts_us - origin_us) * 1000.0).astype(np.int64)
        dur = np.rint(dur_us * 1000.0).astype(np.int64)
        del ts_us, dur_us
        order = np.argsort(ts, kind="stable")
        if len(order) and not (order[1:] > order[:-1]).all():
            ts, dur = ts[order], dur[order]
            for k in list(cols):
                cols[k] = cols[k][order]
        cats = list(self.cat_ix)
        kind_table = np.array([kind_of_category(c) for c in cats] + [0], dtype=np.uint8)
        events = Table({"ts": ts, "dur": dur, "kind": kind_table[cols["cat"]], **cols})
        origin_ns = int(origin_us) * 1000 + (int(base_time_ns) if base_time_ns else 0)
        return TraceData(
            events=events,
            names=[n if isinstance(n, str) else str(n) for n in self.name_ix],
            cats=[c if isinstance(c, str) else str(c) for c in cats],
            pids=list(self.pid_ix),
            tids=list(self.tid_ix),
            origin_ns=origin_ns,
            process_names=self.process_names,
            thread_names=self.thread_names,
            phase_counts=dict(self.phases),
            dropped=dropped,
        )
