"""Host time blocked in host-to-device copy calls, inside the profiled steps.

Why: a copy from pageable memory is synchronous — the calling thread stages the bytes through a driver
buffer and returns when the device has them — so in a loop without a DataLoader the `.to('cuda')` before the
forward reads, to the step instrumentation, as CPU work before the forward: "input preprocessing". The
device timeline alone cannot say whose time that was; the launching call's own host span can. On an H200
the planted pageable scenario's 2.7 ms "data wait" a step was 2.5 ms of `cudaMemcpyAsync` (measured with
its fixed twin: pinned + non_blocking took the step from 3.9 to 1.1 ms).

Each device copy is joined to its launching runtime call by the correlation id (``prep.prepare``); the
call's host span is clipped to the ProfilerStep windows (the trace's whole window when it has none), and
overlapping calls on two threads count once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .prep import DEVICE_CATS, Prepared

H2D_CATS = ("memcpy_h2d_pageable", "memcpy_h2d", "memcpy_h2d_pinned")


@dataclass(frozen=True)
class CopyCalls:
    """Seconds the host spent inside the calls that launched host-to-device copies, over ``window_s``."""

    h2d_call_s: float
    h2d_pageable_call_s: float
    window_s: float  # the profiled steps' total duration (the trace window's without steps)
    steps: int  # profiled steps the window holds (0: the whole trace window)

    @property
    def h2d_call_share(self) -> float:
        return self.h2d_call_s / self.window_s if self.window_s > 0 else 0.0


def copy_calls(p: Prepared, lo: int, hi: int) -> CopyCalls:
    """The host's time inside H2D copy calls; ``lo``/``hi`` bound the trace window (ns)."""
    if len(p.step_num):
        w_start, w_end = p.step_start, p.step_end
    else:
        w_start, w_end = np.array([lo], np.int64), np.array([hi], np.int64)
    window_s = float((w_end - w_start).sum()) / 1e9
    h2d = np.isin(p.cat, [DEVICE_CATS.index(c) for c in H2D_CATS]) & (p.launch >= 0)
    pageable = p.cat == DEVICE_CATS.index("memcpy_h2d_pageable")
    return CopyCalls(h2d_call_s=_inside(p, h2d, w_start, w_end),
                     h2d_pageable_call_s=_inside(p, h2d & pageable, w_start, w_end),
                     window_s=window_s, steps=int(len(p.step_num)))


def _inside(p: Prepared, mask: np.ndarray, w_start: np.ndarray, w_end: np.ndarray) -> float:
    """Seconds of the union of the selected ops' launch-call spans that fall inside the windows."""
    if not mask.any():
        return 0.0
    # one call can launch several device ops (a copy split in chunks): de-duplicate by the launching row
    _, first = np.unique(p.launch[mask], return_index=True)
    s = p.l_start[mask][first]
    e = p.l_end[mask][first]
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    # union of the spans (two threads copying at once count once)
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    group = np.cumsum(new) - 1
    us = s[new]
    ue = np.zeros(len(us), np.int64)
    np.maximum.at(ue, group, e)
    total = 0
    for a, b in zip(w_start.tolist(), w_end.tolist()):
        total += int(np.clip(np.minimum(ue, b) - np.maximum(us, a), 0, None).sum())
    return total / 1e9
