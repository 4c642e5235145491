"""gpusleuth: prove what a GPU job is waiting on, what it costs, and what fixing it is worth.

The public Python surface is small on purpose:

* the explicit instrumentation API for code that wants control — :func:`step`, :func:`phase`, :func:`stage`,
  :func:`watch`, :func:`log` — which is a cheap no-op unless the process runs under ``gpusleuth run``;
* :func:`load_run`, which turns a run directory into the :class:`~gpusleuth.run.model.Run` every analysis uses.
"""

from __future__ import annotations

from gpusleuth._version import __version__

from gpusleuth.api import log, phase, stage, step, watch  # noqa: E402


def sweep(fn, grid, **kwargs):
    """Measure ``fn`` under each configuration of ``grid`` in this process (see docs/experiments.md)."""
    from gpusleuth.experiments import sweep as _sweep

    return _sweep(fn, grid, **kwargs)


def bench(*args, **kwargs):
    """Inference benchmark of a callable over batch sizes: throughput, latency percentiles, the knee."""
    from gpusleuth.experiments import bench as _bench

    return _bench(*args, **kwargs)


def load_run(path):
    """Load a run directory (or a profiler trace) written by gpusleuth into a :class:`Run`."""
    from gpusleuth.sources.rundir import load_run as _load

    return _load(path)


__all__ = ["__version__", "bench", "load_run", "log", "phase", "stage", "step", "sweep", "watch"]
