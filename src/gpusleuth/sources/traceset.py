"""Profiler traces read directly (one Run per rank) as one job."""

from __future__ import annotations

from pathlib import Path

from gpusleuth.run.meta import RunMeta
from gpusleuth.run.model import Run


def trace_job(runs: list[Run]) -> Run:
    """One Run for a trace set: the first rank alone, or a Run whose profiles are the ranks."""
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    meta: RunMeta = {"source": first.meta.get("source", "kineto"), "label": f"{len(runs)} traces",
            "trace_path": first.meta.get("trace_path"), "device": first.meta.get("device"),
            "world_size": first.meta.get("world_size")}
    trace_path = first.meta.get("trace_path")
    path = Path(trace_path).parent if trace_path else None
    return Run(meta=meta, path=path, profiles=list(runs))
