"""The dtype of the op that launched each kernel: kernel → launch call (by correlation) → innermost
enclosing ``cpu_op`` on the launching thread → its ``Input type``.

Why: kernel names drift with every cuBLAS/CUTLASS/trtllm release (``nvjet_*``, ``bmm_MxE4m3_…``), but a
trace recorded with ``record_shapes`` says what the framework handed each op. Only the ops that enclose a
wanted launch are walked (found with one ``searchsorted``), so the cost grows with the GEMM launches, not
with the millions of ops a long trace holds.
"""

from __future__ import annotations

import numpy as np

from gpusleuth.run.model import Table
from gpusleuth.sources.kineto.model import CPU_OP

from . import classify as C
from .prep import Prepared

#: dtype codes: index into DTYPES; -1 where no enclosing op with a floating input is known
DTYPES = ("fp4", "fp8", "bf16", "fp16", "fp32", "fp64")


def launch_op_dtypes(p: Prepared, device_rows: np.ndarray) -> np.ndarray:
    """Per selected device op (indices into ``p``'s device arrays): the DTYPES code of its launching op,
    -1 where the launch, the enclosing op or its ``Input type`` is missing."""
    out = np.full(len(device_rows), -1, np.int8)
    tr = p.trace
    ev = tr.events
    if "itype" not in ev or not tr.input_types or not len(device_rows):
        return out
    dt_tab = np.array([DTYPES.index(d) if (d := C.op_dtype(t)) else -1 for t in tr.input_types] + [-1], np.int8)
    if not (dt_tab >= 0).any():  # no op recorded a floating input (record_shapes off): nothing to walk to
        return out
    launch = p.launch[device_rows]
    has = launch >= 0
    if not has.any():
        return out
    lrow = launch[has]
    l_ts = ev["ts"][lrow]
    l_end = l_ts + np.maximum(ev["dur"][lrow], 0)
    l_thread = _thread_key(ev, lrow)
    ops = np.flatnonzero(ev["kind"] == CPU_OP)
    ops = ops[np.isin(_thread_key(ev, ops), np.unique(l_thread))]
    res = np.full(len(lrow), -1, np.int8)
    if len(ops):
        o_thread = _thread_key(ev, ops)
        o_ts = ev["ts"][ops]
        o_end = o_ts + np.maximum(ev["dur"][ops], 0)
        for th in np.unique(l_thread):
            om = o_thread == th
            lm = np.flatnonzero(l_thread == th)
            res[lm] = _innermost_dtype(o_ts[om], o_end[om], dt_tab[ev["itype"][ops[om]]], l_ts[lm], l_end[lm])
    out[np.flatnonzero(has)] = res
    return out


def _thread_key(ev: Table, rows: np.ndarray) -> np.ndarray:
    key: np.ndarray = ev["pid"][rows].astype(np.int64) * (1 << 31) + ev["tid"][rows].astype(np.int64)
    return key


def _innermost_dtype(o_ts: np.ndarray, o_end: np.ndarray, o_dt: np.ndarray, l_ts: np.ndarray,
                     l_end: np.ndarray) -> np.ndarray:
    """For each launch [l_ts, l_end], the dtype of the innermost op on the thread that encloses it."""
    # keep only ops that contain some launch's start: the ancestors of the launches, a few per launch
    lo = np.sort(l_ts)
    first = np.searchsorted(lo, o_ts, side="left")
    keep = (first < len(lo)) & (lo[np.minimum(first, len(lo) - 1)] <= o_end)
    o_ts, o_end, o_dt = o_ts[keep], o_end[keep], o_dt[keep]
    out = np.full(len(l_ts), -1, np.int8)
    if not len(o_ts):
        return out
    order = np.lexsort((-o_end, o_ts))  # by start, an enclosing op before the ops it contains
    o_ts, o_end, o_dt = o_ts[order], o_end[order], o_dt[order]
    parent = np.full(len(o_ts), -1, np.int64)
    stack: list[int] = []
    ends = o_end.tolist()
    for i, s in enumerate(o_ts.tolist()):
        while stack and ends[stack[-1]] < s:
            stack.pop()
        parent[i] = stack[-1] if stack else -1
        stack.append(i)
    pos = np.searchsorted(o_ts, l_ts, side="right") - 1
    par = parent.tolist()
    for j, (i, e) in enumerate(zip(pos.tolist(), l_end.tolist())):
        while i >= 0 and ends[i] < e:
            i = par[i]
        if i >= 0:
            out[j] = o_dt[i]
    return out
