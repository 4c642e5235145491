"""Shared views of one trace that every analysis needs: device operations, their launches, steps.

Computed once per rank, all as numpy arrays: the device ops (kernels, memcpy, memset; never
``cuda_sync`` markers or GPU-side annotations, which occupy no engine), each op's partition category,
the runtime call that launched it (joined on the ``correlation`` id by sorting, not by a dict per row),
and the ProfilerStep windows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpusleuth.run.trace_data import TraceData
from gpusleuth.sources.kineto.model import CPU_OP, KERNEL, MEMCPY, MEMSET, PYTHON, RUNTIME, USER_ANN

from . import classify as C

#: Device categories in painting priority (an instant where compute runs is compute, whatever else runs).
DEVICE_CATS = ["compute", "comm", "memcpy_h2d_pinned", "memcpy_h2d_pageable", "memcpy_h2d",
               "memcpy_d2h_pinned", "memcpy_d2h_pageable", "memcpy_d2h", "memcpy_d2d", "memcpy_other",
               "memset"]
#: Idle causes in priority order (see docs/trace-analysis.md, "Idle causes").
IDLE_CATS = ["idle_dependency", "idle_kernel_gap", "idle_sync", "idle_data_loader", "idle_optimizer_cpu", "idle_launch",
             "idle_host", "idle_other"]
ALL_CATS = DEVICE_CATS + IDLE_CATS
COMPUTE, COMM = 0, 1


@dataclass
class Prepared:
    trace: TraceData
    # device ops, sorted by start
    rows: np.ndarray  # row index into trace.events
    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    stream: np.ndarray
    name: np.ndarray
    kind: np.ndarray
    cat: np.ndarray  # index into DEVICE_CATS
    launch: np.ndarray  # row index of the launching runtime call, -1 if none found
    l_start: np.ndarray  # launch call start / end (ns), meaningful where launch >= 0
    l_end: np.ndarray
    ready: np.ndarray  # when the op could first run in stream order: max(launch return, previous op's end)
    # steps
    step_num: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    step_start: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    step_end: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    issues: list[str] = field(default_factory=list)
    negative_durations: int = 0

    @property
    def n(self) -> int:
        return len(self.rows)


def prepare(trace: TraceData) -> Prepared:
    ev = trace.events
    issues: list[str] = []
    kind = ev["kind"]
    ts = ev["ts"]
    dur = ev["dur"]
    neg = dur < 0
    nneg = int(neg.sum())
    if nneg:
        issues.append(f"{nneg:,} event(s) have a negative duration; treated as zero-length")
        dur = np.where(neg, 0, dur)
    dmask = (kind == KERNEL) | (kind == MEMCPY) | (kind == MEMSET)
    rows = np.flatnonzero(dmask)
    names = trace.names
    d_name = ev["name"][rows]
    d_kind = kind[rows]
    comm_tab = C.lookup(names, C.is_comm_kernel)
    cat = np.zeros(len(rows), np.int16)  # compute
    cat[(d_kind == KERNEL) & comm_tab[d_name]] = COMM
    # memcpy direction per distinct name
    mc_tab = np.full(len(names) + 1, DEVICE_CATS.index("memcpy_other"), np.int16)
    for code in np.unique(d_name[d_kind == MEMCPY]):
        mc_tab[code] = DEVICE_CATS.index(C.memcpy_category(names[code]))
    is_mc = d_kind == MEMCPY
    cat[is_mc] = mc_tab[d_name[is_mc]]
    cat[d_kind == MEMSET] = DEVICE_CATS.index("memset")
    # a kernel named like a copy/set (HTA's rule: Memcpy*/Memset* names) is memory, not compute
    memname = C.lookup(names, lambda n: n.startswith(("Memcpy", "Memset", "hipMemcpy", "hipMemset")))
    odd = (d_kind == KERNEL) & memname[d_name]
    cat[odd] = DEVICE_CATS.index("memcpy_other")
    start = ts[rows]
    end = start + dur[rows]
    # launches: join device ops to runtime rows sharing the correlation id
    corr = ev["corr"]
    d_corr = corr[rows]
    rt_rows = np.flatnonzero((kind == RUNTIME) & (corr >= 0))
    launch = np.full(len(rows), -1, np.int64)
    if len(rt_rows) and len(rows):
        order = np.argsort(corr[rt_rows], kind="stable")
        rt_sorted = rt_rows[order]
        rc = corr[rt_sorted]
        pos = np.searchsorted(rc, d_corr)
        ok = (pos < len(rc)) & (d_corr >= 0)
        pos = np.minimum(pos, len(rc) - 1)
        ok &= rc[pos] == d_corr
        launch[ok] = rt_sorted[pos[ok]]
    has = launch >= 0
    l_start = np.where(has, ts[np.maximum(launch, 0)], 0)
    l_end = np.where(has, l_start + dur[np.maximum(launch, 0)], 0)
    d_stream = ev["stream"][rows]
    ready = np.maximum(np.where(has, l_end, start), _prev_end_on_stream(start, end, d_stream))
    p = Prepared(trace=trace, rows=rows, start=start, end=end, dur=dur[rows], stream=d_stream,
                 name=d_name, kind=d_kind, cat=cat, launch=launch, l_start=l_start, l_end=l_end,
                 ready=np.minimum(ready, start), issues=issues, negative_durations=nneg)
    _steps(p, dur)
    return p


def _prev_end_on_stream(start: np.ndarray, end: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """End of the latest-ending earlier op on the same stream (a stream runs its ops in order), or the
    minimum int64 for a stream's first op."""
    out = np.full(len(start), np.iinfo(np.int64).min, np.int64)
    if len(start) < 2:
        return out
    order = np.lexsort((start, stream))
    st, en = stream[order], end[order]
    first = np.r_[True, st[1:] != st[:-1]]
    # running max of ends that restarts at each stream: offset each stream's values so a global
    # running max cannot leak across streams, then subtract the offset again
    grp = np.cumsum(first) - 1
    span = int(end.max() - min(int(start.min()), int(end.min()))) + 1
    base = int(min(start.min(), end.min()))
    shifted = (en - base) + grp.astype(np.int64) * span
    reach = np.maximum.accumulate(shifted) - grp.astype(np.int64) * span + base
    prev = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    prev[first] = np.iinfo(np.int64).min
    out[order] = prev
    return out


def _steps(p: Prepared, dur: np.ndarray) -> None:
    """ProfilerStep#N windows from the CPU annotations (one per N; overlaps clipped and reported)."""
    ev = p.trace.events
    step_tab = C.lookup(p.trace.names, C.is_profiler_step)
    kind = ev["kind"]
    m = step_tab[ev["name"]] & ((kind == USER_ANN) | (kind == CPU_OP))  # (np.isin: 18× the time on uint8)
    idx = np.flatnonzero(m)
    if len(idx) == 0:
        return
    nums = np.array([C.step_number(p.trace.names[c]) for c in ev["name"][idx]], np.int64)
    s = ev["ts"][idx]
    e = s + dur[idx]
    # one window per step number (a step annotated on two threads: take the outer extent)
    uniq, inv = np.unique(nums, return_inverse=True)
    ss = np.full(len(uniq), np.iinfo(np.int64).max)
    ee = np.full(len(uniq), np.iinfo(np.int64).min)
    np.minimum.at(ss, inv, s)
    np.maximum.at(ee, inv, e)
    order = np.argsort(ss, kind="stable")
    uniq, ss, ee = uniq[order], ss[order], ee[order]
    over = ee[:-1] > ss[1:]
    if over.any():
        p.issues.append(f"{int(over.sum())} ProfilerStep window(s) overlap the next step; clipped at the next "
                        "step's start so each instant belongs to one step")
        ee[:-1] = np.minimum(ee[:-1], ss[1:])
    p.step_num, p.step_start, p.step_end = uniq, ss, ee
