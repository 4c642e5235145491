"""gpusleuth: prove what a GPU job is waiting on, what it costs, and what fixing it is worth.

The public Python surface is small on purpose:

* the explicit instrumentation API for code that wants control — :func:`step`, :func:`phase`, :func:`stage`,
  :func:`watch`, :func:`log` — which is a cheap no-op unless the process runs under ``gpusleuth run``;
* :func:`load_run`, which turns a run directory into the :class:`~gpusleuth.run.model.Run` every analysis uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpusleuth._version import __version__

from gpusleuth.api import log, phase, stage, step, watch  # noqa: E402

# sweep, bench and load_run import the experiments and the readers (numpy, pyarrow) when first called, not when a
# job's `import gpusleuth` runs. A type checker sees the functions they forward to, with their own signatures, so
# a user's mypy checks a call against those (tests/test_types.py). Not a module __getattr__ (PEP 562): CPython does
# not specialise attribute loads on a module that has one, and `gpusleuth.step()` runs in the job's hot loop.
if TYPE_CHECKING:
    from gpusleuth.experiments.bench import bench
    from gpusleuth.experiments.inprocess import sweep
    from gpusleuth.sources.rundir import load_run
else:  # the forwarders, hidden from the checker, which reads the functions above in their place: each takes
    # whatever its function takes (a call the checker accepts must not be refused here)

    def sweep(*args, **kwargs):
        """Measure ``fn`` under each configuration of ``grid`` in this process (see docs/experiments.md)."""
        from gpusleuth.experiments.inprocess import sweep as _sweep

        return _sweep(*args, **kwargs)

    def bench(*args, **kwargs):
        """Inference benchmark of a callable over batch sizes: throughput, latency percentiles, the knee."""
        from gpusleuth.experiments.bench import bench as _bench

        return _bench(*args, **kwargs)

    def load_run(path):
        """Load a run directory (or a profiler trace) written by gpusleuth into a :class:`Run`."""
        from gpusleuth.sources.rundir import load_run as _load

        return _load(path)


__all__ = ["__version__", "bench", "load_run", "log", "phase", "stage", "step", "sweep", "watch"]
