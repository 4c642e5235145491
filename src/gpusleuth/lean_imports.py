"""Keep pandas out of gpusleuth's own processes.

pyarrow imports pandas, when it is installed, the first time it builds an array: its pandas shim inspects
every input. That costs ~0.4 s of CPU. In the recorder it lands at the first flush, beside a job that is
starting up; in `gpusleuth report` it is a third of a small report's time. gpusleuth never uses pandas,
so processes that are wholly ours (the recorder, report, compare) make imports of it fail, and pyarrow
goes on without it. Not for commands that run user code in-process (`bench` imports the user's factory).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class _NoPandas:
    """A meta-path finder that answers "not installed" for pandas."""

    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {name!r} (kept out of gpusleuth's process)", name=name)
        return None


def keep_pandas_out() -> None:
    """Make ``import pandas`` fail in this process, unless it is already loaded. (A None in sys.modules is
    not enough: pyarrow's Cython import reads sys.modules directly and would get None.)"""
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


def let_pandas_in() -> None:
    """Undo :func:`keep_pandas_out` for a library that probes for pandas with ``importlib.util.find_spec``
    (wandb does, at import), where our "not installed" answer would be an error instead of a None."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _NoPandas)]
