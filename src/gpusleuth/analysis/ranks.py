"""One rank's trace, analysed: ``summarize_rank(run) -> RankSummary``, the per-rank step of a trace set.

Why a summary: the job's analysis (``bundle.analyze``) needs from each rank only its ``TraceAnalysis`` and
its host-op statistics — the cross-rank view (``comm.trace_comm_summary``), the basis of the gains and the
rules all read those, never the rank's events. So the per-rank step is this one function, run the same way
wherever it runs: in the report's own process, in a worker of a local process pool, or as a Ray task
(``pipeline/trace_set.py``). What travels back from a worker is ``portable()``: a few kB per rank, where the
rank's events are hundreds of MB in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from gpusleuth.analysis.host_ops import HostOps, host_op_stats
from gpusleuth.analysis.trace import TraceAnalysis, analyze_trace
from gpusleuth.run.model import Run


@dataclass
class RankSummary:
    """What the job's analysis reads of one rank (a profiler trace)."""

    trace: TraceAnalysis
    host_ops: HostOps | None  # None: a CPU-op-less trace, or one too damaged to say

    def portable(self) -> "RankSummary":
        """Without the trace's painted segments (megabytes; only ``--annotate`` draws them)."""
        return replace(self, trace=self.trace.portable())


def summarize_rank(run: Run, input_spans: tuple[np.ndarray, np.ndarray] | None = None) -> RankSummary:
    """Analyse one rank's trace (``run.trace``): the per-rank step, wherever it runs. ``input_spans``: a
    recording's measured input waits in this trace's process (``host_op_stats`` takes them out of the
    Python time); a trace read alone has none."""
    try:
        ops = host_op_stats(run, input_spans)
    except Exception:  # noqa: BLE001 - a damaged trace must not take the report down; its losses say why
        ops = None
    return RankSummary(trace=analyze_trace(run), host_ops=ops)
