"""The columnar in-memory form of one Kineto trace (one rank): a part of the :class:`~gpusleuth.run.model.Run`.

It lives in ``run/`` because the Run holds it (``Run.trace``) and everything downstream reads it through the
Run; the Kineto reader (``sources/kineto``) builds it, and its event-kind codes (``CPU_OP``, ``KERNEL``…) are
the reader's vocabulary, kept there.

One row per complete (``ph == "X"``) event, as numpy columns; strings are interned once into tables and
the rows hold integer codes. Times are int64 nanoseconds relative to ``origin_ns`` so that float
microsecond timestamps (``1.7e15`` µs since the epoch, where float64 has only ~0.25 µs of resolution)
never lose precision in arithmetic: the offset from the trace's first microsecond is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from gpusleuth.run.meta import JsonObject
from gpusleuth.run.table import Table


@dataclass
class TraceData:
    """Columns of one trace plus its string tables and metadata.

    ``events`` columns: ``ts``/``dur`` (int64 ns, ``ts`` relative to ``origin_ns``), ``kind`` (uint8, see
    ``KIND_NAMES``), ``cat``/``name``/``pid``/``tid`` (int32 codes into the tables), ``corr``/``stream``/
    ``device`` (int64, -1 where absent). Sorted by ``ts``. Only the args the analyses use are kept:
    each extra column costs ~10 % of load time on big traces. ``itype`` (int32) codes into
    ``input_types``: an op's ``Input type`` arg joined with ", " (``"c10::BFloat16, , float"``), ``""``
    where the event has none (traces recorded without ``record_shapes``, and every non-op row). ``icall``
    (int32) codes into ``input_calls``: an op's ``(Input Dims, Concrete Inputs)`` as JSON text (equal codes:
    equal signatures), ``()`` where the event has none.
    """

    events: Table
    names: list[str]
    cats: list[str]
    pids: list[Any]
    tids: list[Any]
    origin_ns: int  # absolute time of ts == 0 (epoch ns when the trace says so)
    meta: JsonObject = field(default_factory=dict)  # the trace's metadata as the file gave it (untrusted)
    process_names: dict[Any, str] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    phase_counts: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)  # rows not kept, by reason
    input_types: list[str] = field(default_factory=list)
    input_calls: list[tuple[str, str] | tuple[()]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.events)

    def col(self, name: str) -> np.ndarray:
        return self.events[name]

    def name_codes_matching(self, predicate: Callable[[str], bool]) -> np.ndarray:
        """Codes of interned names for which ``predicate(name)`` holds — evaluated once per distinct name."""
        return np.fromiter((i for i, n in enumerate(self.names) if predicate(n)), dtype=np.int32)

    def name_mask(self, predicate: Callable[[str], bool]) -> np.ndarray:
        """Row mask for rows whose name satisfies ``predicate`` (per distinct name, then a table lookup)."""
        table = np.zeros(len(self.names) + 1, dtype=bool)
        table[self.name_codes_matching(predicate)] = True
        mask: np.ndarray = table[self.events["name"]]
        return mask

    def __repr__(self) -> str:
        return f"TraceData({len(self)} events, {len(self.names)} names, origin_ns={self.origin_ns})"
