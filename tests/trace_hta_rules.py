"""HTA 0.5.0's temporal-breakdown rules, re-stated over our columns — for tests only.

Used to show that every difference between our device split and HTA's is one of the documented
definition changes (docs/trace-analysis.md): re-applying HTA's rules to our loaded columns reproduces
HTA's published numbers. Written from HTA's documented behaviour, not copied.
"""

from __future__ import annotations

import re

import numpy as np

from gpusleuth.analysis.intervals import union
from gpusleuth.run.trace_data import TraceData
from gpusleuth.sources.kineto.model import DEVICE_KINDS, RUNTIME, SYNC

_COMM = re.compile(r"^nccl.*Kernel")
_MEM = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def hta_split(tr: TraceData, include_last_step: bool = True, round_ns: bool = True,
              keep_orphans: bool = False, with_sync_rows: bool = True, cpu_rows_with_stream: bool = True) -> dict:
    """HTA's split. Each switch turned off removes one of the documented differences:
    ``keep_orphans`` skips HTA's correlation filter (GPU ops whose launch is not a kept CPU event),
    ``round_ns=False`` keeps ns timestamps, ``with_sync_rows=False`` drops cuda_sync rows,
    ``cpu_rows_with_stream=False`` stops counting CPU rows that carry a ``stream`` arg as GPU work."""
    ev = tr.events
    ts, dur = ev["ts"].copy(), np.maximum(ev["dur"], 0)
    end = ts + dur
    if round_ns and ((ts % 1000) != 0).any():  # HTA: ceil start, floor end to whole µs
        ts_r = -(-ts // 1000) * 1000
        end = (end // 1000) * 1000
        ts = ts_r
    gpu = ev["stream"] >= 0
    gpu &= ev["kind"] != RUNTIME  # runtime rows carrying a stream arg are CPU rows in HTA's frame
    if not with_sync_rows:
        gpu &= ev["kind"] != SYNC
    if not cpu_rows_with_stream:
        gpu &= np.isin(ev["kind"], DEVICE_KINDS + (SYNC,))
    steps = np.array([n.startswith("ProfilerStep") for n in tr.names] + [False])[ev["name"]] & ~gpu
    if steps.sum() >= 2 and not keep_orphans:
        last_start, last_end = ts[steps].max(), end[steps].max()
        cpu = ~gpu & ((ts <= last_end) if include_last_step else (ts < last_start))
        keep_corr = np.unique(ev["corr"][cpu & (ev["corr"] >= 0)])
        gpu &= np.isin(ev["corr"], keep_corr) & (ev["corr"] >= 0)
    s, e = ts[gpu], end[gpu]
    if len(s) == 0:
        return {"idle": 0.0, "compute": 0.0, "non_compute": 0.0, "span_us": 0}
    names = [tr.names[c] for c in ev["name"][gpu]]
    comp = np.array([not _COMM.match(n) and not _MEM.match(n) and not _NOT_COMPUTE.match(n) for n in names])
    span = e.max() - s.min()
    bs, be = union(s, e)
    cs, ce = union(s[comp], e[comp])
    busy, compute = (be - bs).sum(), (ce - cs).sum()
    return {"idle": (span - busy) / span, "compute": compute / span, "non_compute": (busy - compute) / span,
            "span_us": span / 1000}
