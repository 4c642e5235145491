"""Run totals and recent-window numbers of the job's steps, tailed from the hook's ``raw/events-*.tsv``.

Shared by the live Prometheus exporter (recorder/exporter.py, in the recorder process) and the trainer
callbacks (integrations/, inside the job, reading the job's own event file): both want gpusleuth's own
step numbers — the ones the final report is made of — while the job runs, at the cost of reading only
what was appended since the last look.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpusleuth.report.live import _EventsTail


def window_stats(window) -> tuple[float | None, float | None, float | None]:
    """(median step s, data-wait share, samples/s) of recent ``(start, end, wait, samples)`` step tuples."""
    win = list(window)
    durs = sorted(e - b for b, e, _, _ in win)
    total = sum(durs)
    if not durs or total <= 0:
        return (durs[len(durs) // 2] / 1e9 if durs else None), None, None
    share = min(sum(max(w, 0) for _, _, w, _ in win) / total, 1.0)
    known = [(e - b, n) for b, e, _, n in win if n >= 0]
    busy = sum(d for d, _ in known)
    per_s = sum(n for _, n in known) / (busy / 1e9) if known and busy > 0 else None
    return durs[len(durs) // 2] / 1e9, share, per_s


class StepTotals(_EventsTail):
    """The live view's tail of the hook's event files, plus the run totals a counter needs."""

    def __init__(self, raw: Path):
        super().__init__(raw)
        self.ranks: dict[int, str] = {}
        self.step_ns: dict[int, int] = {}
        self.wait_ns: dict[int, int] = {}
        self.optimizer_ns: dict[int, int] = {}
        self.samples: dict[int, int] = {}
        self.phase_ns: dict[tuple[int, str], int] = {}

    def _line(self, pid: int, line: str) -> None:
        super()._line(pid, line)
        kind, _, rest = line.partition("\t")
        f = rest.split("\t")
        try:
            if kind == "S":
                start, end, wait, samples, opt = int(f[0]), int(f[1]), int(f[2]), int(f[4]), int(f[5])
                self.step_ns[pid] = self.step_ns.get(pid, 0) + max(end - start, 0)
                self.wait_ns[pid] = self.wait_ns.get(pid, 0) + max(wait, 0)
                self.optimizer_ns[pid] = self.optimizer_ns.get(pid, 0) + max(opt, 0)
                if samples >= 0:
                    self.samples[pid] = self.samples.get(pid, 0) + samples
            elif kind == "P":
                key = (pid, f[0])
                self.phase_ns[key] = self.phase_ns.get(key, 0) + max(int(f[2]) - int(f[1]), 0)
            elif kind == "H":
                rank = json.loads(rest).get("rank")
                self.ranks[pid] = str(rank) if rank not in (None, "") else "0"
        except (IndexError, ValueError, AttributeError):
            return  # a partial or foreign line: the finished run's parser counts it as a loss
