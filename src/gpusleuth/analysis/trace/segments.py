"""Where each category of the exposed-time partition lies in time, not only how much of it there was.

The partition (``timeline.partition``) answers "how many ns of each category per step"; the annotated
trace and the idle-gap histogram need the *intervals*: which stretch of the timeline was, say,
``idle_data_loader``. Both come from the same painted segments, so the intervals drawn on a trace add up
to exactly the numbers in the report.

Kept out of ``TraceAnalysis.to_dict()`` (the JSON contract): a long trace has hundreds of thousands of
intervals, which belong in a trace viewer, not in a report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .prep import ALL_CATS, DEVICE_CATS


@dataclass
class Segments:
    """Maximal runs of one partition category, sorted and disjoint, covering the trace window.

    Times are int64 ns on the trace's own clock (relative to ``TraceData.origin_ns``), like the event
    columns. ``cat`` indexes :data:`ALL_CATS`.
    """

    start: np.ndarray
    end: np.ndarray
    cat: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    def idle_gaps(self) -> "IdleGaps":
        """Maximal stretches with no device work, each with the cause that took most of it.

        A gap often has several causes in a row (host code, then a launch): the annotated trace shows the
        runs; the gap-size histogram needs one label per hole in the device timeline, so it takes the
        dominant one (ties go to the higher-priority cause).
        """
        nd = len(DEVICE_CATS)
        idle = self.cat >= nd
        if not idle.any():
            e = np.empty(0, np.int64)
            return IdleGaps(e, e, np.empty(0, np.int16))
        idx = np.flatnonzero(idle)
        # a new gap starts where an idle run does not directly continue the previous idle run
        new = np.r_[True, (idx[1:] != idx[:-1] + 1) | (self.start[idx[1:]] != self.end[idx[:-1]])]
        gap_id = np.cumsum(new) - 1
        ngaps = int(gap_id[-1]) + 1
        first = idx[new]
        last = idx[np.r_[new[1:], True]]
        # dominant cause per gap: ns per (gap, cause) via bincount, then argmax (lowest index wins ties)
        ncause = len(ALL_CATS) - nd
        flat = gap_id * ncause + (self.cat[idx] - nd)
        ns = np.bincount(flat, weights=(self.end[idx] - self.start[idx]).astype(np.float64),
                         minlength=ngaps * ncause).reshape(ngaps, ncause)
        return IdleGaps(self.start[first], self.end[last], (ns.argmax(axis=1) + nd).astype(np.int16))


@dataclass
class IdleGaps:
    start: np.ndarray  # int64 ns, trace clock
    end: np.ndarray
    cause: np.ndarray  # index into ALL_CATS (always an idle category)

    def __len__(self) -> int:
        return len(self.start)


def runs(bounds: np.ndarray, label: np.ndarray) -> Segments:
    """Merge consecutive painted segments that carry the same label."""
    if len(bounds) < 2:
        e = np.empty(0, np.int64)
        return Segments(e, e, np.empty(0, np.int16))
    change = np.r_[True, label[1:] != label[:-1]]
    first = np.flatnonzero(change)
    ends_at = np.r_[first[1:], len(label)]
    return Segments(bounds[first].astype(np.int64), bounds[ends_at].astype(np.int64),
                    label[first].astype(np.int16))
