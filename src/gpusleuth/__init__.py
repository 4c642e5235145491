"""gpusleuth: prove what a GPU job is waiting on, what it costs, and what fixing it is worth.

The public Python surface is small on purpose:

* the explicit instrumentation API for code that wants control — :func:`step`, :func:`phase`, :func:`stage`,
  :func:`watch`, :func:`log` — which is a cheap no-op unless the process runs under ``gpusleuth run``;
* :func:`load_run`, which turns a run directory into the :class:`~gpusleuth.run.model.Run` every analysis uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from gpusleuth._version import __version__

from gpusleuth.api import log, phase, stage, step, watch  # noqa: E402

# sweep, bench and load_run are the experiments' and the readers' own functions, imported (with numpy and pyarrow)
# when first looked up, not when a job's `import gpusleuth` runs: a type checker and help() see their signatures.
_LAZY = {"sweep": "gpusleuth.experiments.inprocess", "bench": "gpusleuth.experiments.bench",
         "load_run": "gpusleuth.sources.rundir"}

if TYPE_CHECKING:
    from gpusleuth.experiments.bench import bench
    from gpusleuth.experiments.inprocess import sweep
    from gpusleuth.sources.rundir import load_run
else:  # hidden from the type checker, which would otherwise take every unknown name of the package as defined

    def __getattr__(name):
        where = _LAZY.get(name)
        if where is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = globals()[name] = getattr(importlib.import_module(where), name)
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = ["__version__", "bench", "load_run", "log", "phase", "stage", "step", "sweep", "watch"]
