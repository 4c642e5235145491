"""The Run's columnar table: equal-length numpy columns under names, never a Python object per sample or event.

A leaf module so that every part of the Run (``run/model.py``, the trace's columns in ``run/trace_data.py``) can
hold one without importing the Run; ``run.model`` re-exports it, where most code imports it from.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np


class Table:
    """Equal-length numpy columns under names; the in-memory twin of one Parquet table."""

    __slots__ = ("columns",)

    def __init__(self, columns: dict[str, np.ndarray] | None = None):
        self.columns: dict[str, np.ndarray] = dict(columns or {})
        lengths = {len(v) for v in self.columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns of unequal length: { {k: len(v) for k, v in self.columns.items()} }")

    def __len__(self) -> int:
        for v in self.columns.values():
            return len(v)
        return 0

    def __bool__(self) -> bool:
        return len(self) > 0

    def __contains__(self, name: str) -> bool:
        return name in self.columns

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.columns.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def filter(self, mask: np.ndarray) -> "Table":
        return Table({k: v[mask] for k, v in self.columns.items()})

    def sort_by(self, name: str) -> "Table":
        order = np.argsort(self.columns[name], kind="stable")
        return Table({k: v[order] for k, v in self.columns.items()})

    def __repr__(self) -> str:
        return f"Table({len(self)} rows: {', '.join(self.columns)})"
