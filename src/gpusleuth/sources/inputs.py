"""The one door in: whatever the user named — run directories (one, or several of one job), profiler traces
(a trace set, one per rank), GPU logs, metric exports, Nsight Systems exports — becomes the Runs a report is
built from. The CLI parses flags and hands the paths here; nothing else decides what a path is.

A trace set may be read (and analysed rank by rank) in worker processes; how is the caller's choice
(``read_trace_set``: ``pipeline/trace_set.py``'s pool or Ray), so that this module stays a reader.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from gpusleuth.errors import InputError
from gpusleuth.run.files import is_directory
from gpusleuth.run.model import Run

if TYPE_CHECKING:
    from gpusleuth.analysis.ranks import RankSummary  # the trace-set workers' result: a type only

# paths → (one Run per trace, their per-rank summaries or None when the ranks are to be analysed here)
TraceSetReader = Callable[[list[Path]], tuple[list[Run], "list[RankSummary] | None"]]


@dataclass
class Inputs:
    """What the user named, read."""

    job: Run  # the one Run the report is built from
    kind: str  # "rundirs", "kineto", or the detected format of a log / export (sources/detect.py)
    # the Runs holding a profiler trace each, in the report's rank order (what --annotate copies)
    traces: list[Run] = field(default_factory=list)
    ranks: list[RankSummary] | None = None  # per-rank summaries computed by worker processes (a trace set)

    @property
    def run_dirs(self) -> bool:
        return self.kind == "rundirs"


def read_inputs(paths: Sequence[Path], *, import_options: Any = None,
                read_trace_set: TraceSetReader | None = None, files_only: bool = False) -> Inputs:
    """Any user input as :class:`Inputs`. Run directories and files cannot be mixed (a sentence says so);
    a missing or unreadable path is a sentence naming it. ``files_only`` (``import``: files become a run
    directory): the paths are files read as one export, profiler traces included (no trace set), and a
    directory is a sentence."""
    paths = [Path(p) for p in paths]
    dirs = [] if files_only else [p for p in paths if is_directory(p)]
    if dirs:
        if len(dirs) < len(paths):
            other = next(p for p in paths if not is_directory(p))
            raise InputError(other, "give run directories or trace files, not both")
        from gpusleuth.sources.jobdirs import load_job

        job = load_job(dirs)
        return Inputs(job=job, kind="rundirs", traces=list(job.profiles))
    for p in paths:
        try:
            os.lstat(p)
        except OSError as exc:  # missing, a name too long, a directory on the way we may not enter
            if exc.errno == errno.ENOENT:
                raise InputError(p, "no such file or directory") from None
            raise InputError(p, f"cannot be read ({exc.strerror or exc})") from None
    from gpusleuth.sources.detect import as_job, load_files, sniff

    if not files_only and all(sniff(p) == "kineto" for p in paths):
        from gpusleuth.sources.kineto import load_traces
        from gpusleuth.sources.traceset import trace_job

        if read_trace_set is not None:
            runs, ranks = read_trace_set(paths)
        else:
            runs, ranks = load_traces(paths), None
        return Inputs(job=trace_job(runs), kind="kineto", traces=runs, ranks=ranks)
    # nvidia-smi/dmon logs, DCGM/Prometheus data, Nsight Systems exports (sources/detect.py)
    kind, runs = load_files(paths, import_options)
    return Inputs(job=as_job(runs), kind=kind, traces=runs)
