"""A trace set's ranks analysed in parallel: a local process pool, or a Ray cluster (``report --ray``).

Why: HTA, like gpusleuth until now, holds every rank of a trace set in one process — 64 ranks × 50 MB of
JSON is tens of GB of events. Here each rank is read and analysed on its own (``load_trace`` then
``analysis.ranks.summarize_rank``, the same function the single-process report runs) and only its
``RankSummary.portable()`` (a few kB) travels back; the cross-rank step (``analysis.bundle.analyze`` with
``ranks=``: communication, stragglers, the rules) reads only those. So the three paths give the same report
by construction, and the report's process never holds more than one rank's summary per rank.

* **with events** (one file, or ``--annotate``, which copies each trace with its painted segments):
  ``load_traces`` as before; every rank's events stay in memory together.
* **in this process, rank by rank** (a small set, or ``--jobs 1``): the same per-rank step, one rank after
  another; the report's process holds one rank's events at a time.
* **local pool** (a set worth it): ``ProcessPoolExecutor`` with *spawn* workers (no fork of a process that
  may hold threads), as many as ranks, cores and memory allow — each worker holds one rank at a time, so
  the peak is about workers × one rank's peak (``rank_peak_bytes``), whatever the rank count.
* **Ray** (``--ray [ADDRESS]``): one task per rank; ``ray.init()`` starts a local cluster when no address is
  given. Workers read the trace files **by path**: on a remote cluster the paths must be visible to every
  node (a shared filesystem) — shipping GBs of traces through the object store would cost more than it saves.

A damaged rank gives the same sentence or salvage as in-process (the worker returns the ``InputError``'s
path and problem; its losses travel in the rank's ``Run``). A worker that dies without an answer (the
out-of-memory killer) is named: the ranks it may have held are retried one at a time, and the one that
kills its worker again is a sentence naming the file.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from gpusleuth.analysis.ranks import RankSummary, summarize_rank
from gpusleuth.errors import InputError
from gpusleuth.run.model import Run

#: Below this much trace JSON in all (uncompressed) a set is analysed in the report's process, rank by rank:
#: starting a spawn pool (fresh interpreters importing numpy and gpusleuth) cost ~1.3 s here, while rank by
#: rank runs ~20 ms per MB of JSON — a pool of 2 pays that back only on a set of a few hundred MB
#: (benchmarks/trace_set_scale.py; BENCHMARKS.md, "Trace sets of many ranks").
SMALL_SET_BYTES = 256 * 2**20
#: a rank's peak memory while read and analysed, per byte of uncompressed trace JSON, and a worker's own
#: footprint: measured 0.66 B/B over a 33 MiB interpreter on a 47 MB rank (1.5 B/B on an 8 MB one);
#: planned with margin, to keep workers × peak within the available memory
PEAK_PER_JSON_BYTE = 1.0
WORKER_BASE_BYTES = 100 * 2**20
#: share of the available memory the workers may plan to use
MEMORY_SHARE = 0.7

Progress = Callable[[int, int], None]


@dataclass
class RankResult:
    """What a worker sends back for one rank: its Run without the events, and its summary."""

    run: Run
    summary: RankSummary


@dataclass
class RankFailure:
    """A rank that could not be read: the ``InputError``'s parts (an exception does not pickle with them)."""

    path: str
    problem: str


def analyse_rank_file(path: str, two_processes: bool = True) -> RankResult | RankFailure:
    """The per-rank step for a file: read it, analyse it, keep the summary and drop the events.
    ``two_processes``: a big rank may be read by two processes (``sources/kineto/split.py``)."""
    from gpusleuth.sources.kineto import load_trace

    try:
        run = load_trace(path, two_processes=two_processes)
    except InputError as exc:
        return RankFailure(exc.path, exc.problem)
    summary = summarize_rank(run).portable()
    run.trace = None  # the events stay in the worker
    return RankResult(run, summary)


def analyse_rank_in_worker(path: str) -> RankResult | RankFailure:
    """:func:`analyse_rank_file` in a pool's or Ray's worker: the workers already share the cores out, so each
    rank is read by its worker alone (no second process per rank)."""
    return analyse_rank_file(path, two_processes=False)


def rank_peak_bytes(json_size: int) -> int:
    """Estimated peak memory of one worker reading and analysing a rank of ``json_size`` bytes of JSON."""
    return int(WORKER_BASE_BYTES + PEAK_PER_JSON_BYTE * json_size)


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask: a container's or a job scheduler's share)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def plan_workers(sizes: Sequence[int], jobs: int | None, available: int | None = None,
                 cores: int | None = None) -> int:
    """How many worker processes: ``jobs`` when given (at most one per rank), else as many as ranks, cores
    and memory allow; 1 (this process, rank by rank) for a set below ``SMALL_SET_BYTES``. Not fewer on a
    busy machine: measured at load 14 on 2 cores, 2 workers still finished 16+ ranks 1.4–1.8× sooner."""
    if jobs is not None:
        return max(1, min(jobs, len(sizes)))
    if len(sizes) < 2 or sum(sizes) < SMALL_SET_BYTES:
        return 1
    if available is None:
        import psutil

        available = psutil.virtual_memory().available
    if cores is None:
        cores = usable_cores()
    by_memory = int(available * MEMORY_SHARE // rank_peak_bytes(max(sizes)))
    return max(1, min(len(sizes), cores, by_memory))


def load_trace_set(paths: Sequence[Path], *, jobs: int | None = None, ray_address: str | None = None,
                   keep_events: bool = False, progress: Callable[[int, str], Progress | None] | None = None
                   ) -> tuple[list[Run], list[RankSummary] | None]:
    """Each trace file's Run (without its events) and its summary, rank by rank; or, for one file or with
    ``keep_events`` (``--annotate``), the Runs with their events and ``None`` (``analyze`` summarizes them).

    ``jobs``: worker processes (1: one rank after another in this process; None: ``plan_workers``);
    ``ray_address``: run the ranks as Ray tasks ("" starts a local cluster); ``progress(total, unit)``
    makes a ``(done, total)`` callback (or None) over "ranks" analysed, or "bytes" read with the events.
    """
    from gpusleuth.sources.kineto import distinct_files, json_size

    files, _sizes, notes = distinct_files([Path(p) for p in paths])
    if keep_events or len(files) < 2:  # one rank: nothing to share out
        return _with_events(paths, progress), None
    tick = progress(len(files), "ranks") if progress is not None else None
    if ray_address is not None:
        results = _ray_map(files, ray_address, tick)
    else:
        workers = plan_workers([json_size(p) for p in files], jobs)
        results = _pool_map(files, workers, tick) if workers > 1 else _here(files, tick)
    runs, summaries = [], []
    for res in results:
        if isinstance(res, RankFailure):
            raise InputError(res.path, res.problem)
        runs.append(res.run)
        summaries.append(res.summary)
    if notes and runs:
        runs[0].losses.extend(notes)
    return runs, summaries


def _here(files: list[Path], tick: Progress | None) -> list[RankResult | RankFailure]:
    """The per-rank step in this process, one rank after another: memory of one rank at a time."""
    results = []
    for i, p in enumerate(files):
        results.append(analyse_rank_file(str(p)))
        if isinstance(results[-1], RankFailure):
            break
        if tick is not None:
            tick(i + 1, len(files))
    return results


def _with_events(paths: Sequence[Path], progress: Callable[[int, str], Progress | None] | None) -> list[Run]:
    from gpusleuth.sources.kineto import load_traces

    total = sum(p.stat().st_size for p in paths if p.is_file())
    return load_traces(paths, progress=progress(total, "bytes") if progress is not None else None)


def _pool_map(files: list[Path], workers: int, tick: Progress | None,
              step: Callable[[str], RankResult | RankFailure] = analyse_rank_in_worker) -> list[RankResult | RankFailure]:
    """Every rank through a spawn pool; ranks whose worker died are retried alone (see the module doc).
    ``step``: the per-rank function (a module-level function: spawn workers import it by name)."""
    results: dict[int, RankResult | RankFailure] = {}
    pending = list(range(len(files)))
    pending = _run_pool(files, pending, workers, results, tick, step)
    for i in pending:  # their pool broke: one at a time, so a rank that kills its worker is known
        if _run_pool(files, [i], 1, results, tick, step):
            raise InputError(files[i], "the worker process analysing this trace died without an answer "
                                       "(killed by the system — most often out of memory); try fewer "
                                       "--jobs, or a machine with more memory")
    return [results[i] for i in range(len(files))]


def _run_pool(files: list[Path], todo: list[int], workers: int, results: dict[int, RankResult | RankFailure], tick: Progress | None,
              step: Callable[[str], RankResult | RankFailure]) -> list[int]:
    """Run ``todo`` in a fresh pool; returns the ranks left unanswered because a worker died."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    lost: list[int] = []
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(step, str(files[i])): i for i in todo}
        for fut in as_completed(futures):
            i = futures[fut]
            try:
                results[i] = fut.result()
            except BrokenProcessPool:
                lost.append(i)
                continue
            if tick is not None:
                tick(len(results), len(files))
    return sorted(lost)


def _ray_map(files: list[Path], address: str, tick: Progress | None) -> list[RankResult | RankFailure]:
    """One Ray task per rank, reading its file by path (a remote cluster needs the paths on its nodes)."""
    try:
        import ray
    except ImportError:
        raise InputError(files[0], "--ray needs Ray: pip install 'gpusleuth[ray]'") from None
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address or None, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.ERROR)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError(address or "ray", f"cannot start or reach the Ray cluster: {exc}") from None
    try:
        task = ray.remote(max_retries=0)(analyse_rank_in_worker)
        refs = {task.remote(str(p)): i for i, p in enumerate(files)}
        results: dict[int, RankResult | RankFailure] = {}
        waiting = list(refs)
        while waiting:
            done, waiting = ray.wait(waiting, num_returns=1)
            i = refs[done[0]]
            try:
                results[i] = ray.get(done[0])
            except ray.exceptions.RayTaskError as exc:  # a bug in gpusleuth: as it would raise in-process
                raise exc.cause from None
            except ray.exceptions.RayError as exc:  # the worker died (OOM-killed) or was lost
                raise InputError(files[i], "the Ray worker analysing this trace failed without an answer "
                                           f"({type(exc).__name__}: most often out of memory)") from None
            if tick is not None:
                tick(len(results), len(files))
        return [results[i] for i in range(len(files))]
    finally:
        if started:
            ray.shutdown()
