"""Data problems found in a trace, as plain sentences for ``issues``.

None of these stop the analysis: each is counted, worked around (negative durations count as zero,
ops without a launch simply get no launch statistics), and said out loud so a reader can judge how far
to trust the numbers.
"""

from __future__ import annotations

import numpy as np

from gpusleuth.sources.kineto.model import KERNEL

from .prep import Prepared

#: Overlaps smaller than this are float→ns rounding of ns-resolution traces, not real overlaps.
OVERLAP_TOLERANCE_NS = 1_000


def find_issues(p: Prepared) -> list[str]:
    tr = p.trace
    out = list(p.issues)
    if len(tr.events) == 0:
        out.append("the trace has no complete events: nothing to analyse")
        return out
    if p.n == 0:  # a CPU profile: not a data problem (TraceAnalysis.cpu_only says it, and the report with it)
        return out
    # kernels overlapping on one stream (a stream executes in order, so this is a clock/recording fault)
    km = p.kind == KERNEL
    s, e, st = p.start[km], p.end[km], p.stream[km]
    order = np.lexsort((s, st))
    s, e, st = s[order], e[order], st[order]
    if len(s) > 1:
        same = st[1:] == st[:-1]
        prev_end = e[:-1]
        # running max of ends within each stream: restart the maximum at each stream change
        grp = np.r_[0, np.cumsum(~same)]
        reach = prev_end.copy()
        for g in np.unique(grp[1:][same]):
            idx = np.flatnonzero((grp[1:] == g) & same)
            reach[idx] = np.maximum.accumulate(prev_end[idx])
        ov = same & (s[1:] < reach - OVERLAP_TOLERANCE_NS)
        if ov.any():
            amount = (reach - s[1:])[ov]
            streams = sorted({int(x) for x in st[1:][ov]})
            out.append(f"{int(ov.sum()):,} kernel(s) start before the previous kernel on the same stream ended "
                       f"(streams {', '.join(map(str, streams[:5]))}; max overlap {amount.max() / 1e3:,.1f} µs); "
                       "busy time uses the union, so nothing is double-counted")
    corr = tr.events["corr"][p.rows]
    missing = corr < 0
    if missing.any():
        out.append(f"{int(missing.sum()):,} GPU op(s) have no correlation id: they cannot be tied to the CPU "
                   "call that launched them (no launch statistics or idle-cause evidence for them)")
    orphan = (~missing) & (p.launch < 0)
    if orphan.any():
        out.append(f"{int(orphan.sum()):,} GPU op(s) have no matching launch call in the trace (launched before "
                   "profiling started, or the runtime row was dropped): excluded from launch statistics")
    return out
