"""The columnar in-memory form of one Kineto trace (one rank).

One row per complete (``ph == "X"``) event, as numpy columns; strings are interned once into tables and
the rows hold integer codes. Times are int64 nanoseconds relative to ``origin_ns`` so that float
microsecond timestamps (``1.7e15`` µs since the epoch, where float64 has only ~0.25 µs of resolution)
never lose precision in arithmetic: the offset from the trace's first microsecond is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from gpusleuth.run.model import Table

# Event kinds, from the Kineto category (``cat``). Small ints so masks are cheap.
OTHER, CPU_OP, RUNTIME, KERNEL, MEMCPY, MEMSET, USER_ANN, GPU_ANN, SYNC, PYTHON, TRACE = range(11)
KIND_NAMES = ["other", "cpu_op", "runtime", "kernel", "memcpy", "memset", "user_annotation",
              "gpu_user_annotation", "cuda_sync", "python_function", "trace"]
_CAT_KIND = {
    "cpu_op": CPU_OP, "operator": CPU_OP, "Operator": CPU_OP,
    "cuda_runtime": RUNTIME, "cuda_driver": RUNTIME, "Runtime": RUNTIME, "Driver": RUNTIME,
    "kernel": KERNEL, "Kernel": KERNEL,
    "gpu_memcpy": MEMCPY, "Memcpy": MEMCPY,
    "gpu_memset": MEMSET, "Memset": MEMSET,
    "user_annotation": USER_ANN, "gpu_user_annotation": GPU_ANN,
    "cuda_sync": SYNC, "python_function": PYTHON, "Trace": TRACE,
}
#: kinds that occupy the device (what "busy" means); cuda_sync rows and GPU annotations do not.
DEVICE_KINDS = (KERNEL, MEMCPY, MEMSET)


def kind_of_category(cat: Any) -> int:
    return _CAT_KIND.get(cat, OTHER) if isinstance(cat, str) else OTHER


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
    meta: dict[str, Any] = field(default_factory=dict)
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
