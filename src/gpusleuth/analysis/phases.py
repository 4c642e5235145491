"""Time in named phases (eval, checkpoint, …) over a window: computed once, here.

Why one computation: the step view carves phase time out of each step, the wall-time partition gives each
phase its seconds, and the live view carves its recent steps the same way. Summed in three places, phase
time drifted (the partition resolved overlaps between names, the carving took their union). Here: each
name's own union within the window, and where names overlap, the instant goes to the name that started
first — so the parts sum to the union, the time the carving takes out of steps.

The per-occurrence statistics of the training process's phases (how often, how long each, the step after
it) are ``analysis/loop.py``'s ``PhaseStats``: counts of occurrences, not a partition of time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpusleuth.analysis import intervals as iv
from gpusleuth.run.model import Table

_EMPTY = np.empty(0, np.int64)


@dataclass
class PhaseTime:
    """Phase time within ``[lo, hi]`` (ns)."""

    lo: int = 0
    hi: int = 0
    # each name (in the order their first occurrences started): its own union, and the union of the names
    # that started before it (the part of its own union those cover is theirs)
    own: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    before: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    union_s: np.ndarray = field(default_factory=lambda: _EMPTY)  # every phase, merged: what steps lose
    union_e: np.ndarray = field(default_factory=lambda: _EMPTY)

    def ns(self, lo: int | None = None, hi: int | None = None) -> dict[str, int]:
        """Nanoseconds of each name within ``[lo, hi]`` (default: the whole window); they sum to the union's."""
        lo = self.lo if lo is None else max(lo, self.lo)
        hi = self.hi if hi is None else min(hi, self.hi)
        out = {}
        for name, (s, e) in self.own.items():
            s, e = iv.clip(s, e, lo, hi)
            cs, ce = self.before[name]
            out[name] = iv.total(s, e) - int(iv.overlap_each(s, e, cs, ce).sum())
        return out

    def covered(self, lo: int, hi: int) -> int:
        """How much of ``[lo, hi]`` some phase covers."""
        return int(iv.overlap_each(np.array([lo], np.int64), np.array([hi], np.int64),
                                   self.union_s, self.union_e)[0])


def phase_time(phases: Table, lo: int, hi: int) -> PhaseTime:
    """The phases of a run (every process's: a rank's checkpoint stalls the others too) within [lo, hi]."""
    out = PhaseTime(lo=lo, hi=hi)
    if not len(phases):
        return out
    order = np.argsort(phases["start_ns"], kind="stable")
    names = phases["name"][order]
    covered_s, covered_e = _EMPTY, _EMPTY
    for name in dict.fromkeys(names.tolist()):
        sel = order[names == name]
        s, e = iv.union(*iv.clip(phases["start_ns"][sel], phases["end_ns"][sel], lo, hi))
        out.own[str(name)], out.before[str(name)] = (s, e), (covered_s, covered_e)
        covered_s, covered_e = iv.union(np.r_[covered_s, s], np.r_[covered_e, e])
    out.union_s, out.union_e = covered_s, covered_e
    return out

