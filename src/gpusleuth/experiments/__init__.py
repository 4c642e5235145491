"""Experiments that verify a fix: sweeps of training knobs, the largest batch that fits, inference benchmarks.

A diagnosis is a hypothesis until it is measured. This package runs the measurement on the user's own job
and says which setting to keep, with a noise band, and whether an earlier report's prediction held.

* :func:`run_sweep` — ``gpusleuth sweep``: one recorded run per configuration and repeat (``runner``);
* :func:`sweep` — the same in one process, for a callable (``inprocess``);
* :func:`find_max_batch` / :func:`search` — largest batch that fits (``maxbatch``);
* :func:`bench` — inference latency/throughput per batch, the knee, batching signs (``bench``).
"""

from gpusleuth.experiments.bench import bench
from gpusleuth.experiments.inprocess import sweep
from gpusleuth.experiments.maxbatch import find_max_batch, search
from gpusleuth.experiments.runner import SweepOptions, run_sweep

__all__ = ["bench", "find_max_batch", "run_sweep", "search", "sweep", "SweepOptions"]
