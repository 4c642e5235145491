"""Live numbers for ``gpusleuth run --live``, read from the run directory while the job writes it
(the tails themselves are ``sources/livetail.py``).

Runs in the launcher process (never in the job), so it cannot slow the training loop; it still keeps
its own cost small: each poll reads only the bytes appended since the last one (files are tailed by
offset — the hook's ``raw/events-*.tsv`` lines and the recorder's Arrow IPC streams, message by message),
keeps a few recent values, and takes the window statistics over the last steps from ``analysis/window.py``
(the report's carving and definitions, for the same steps). A partial line or a
partial Arrow message at the end of a file is kept for the next poll.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa

from gpusleuth.analysis.stalls import judge
from gpusleuth.analysis.window import window_stats
from gpusleuth.sources.livetail import RunTails
from gpusleuth.sources.stalls import StallTail


@dataclass
class LiveSnapshot:
    elapsed_s: float
    steps: int = 0
    step_time_s: float | None = None  # median of the window
    samples_per_s: float | None = None
    data_wait_share: float | None = None
    gpu_util: float | None = None  # mean over GPUs of the latest sample
    sm_active: float | None = None
    power_w: float | None = None  # sum over GPUs
    cpu_pct: float | None = None  # host, all cores
    main_cpu_pct: float | None = None  # training process, % of a core
    workers_cpu_pct: float | None = None  # DataLoader workers together, % of a core
    gpus: int = 0
    stalls: int = 0  # stalls the recorder's watch saw so far
    stall_s: float | None = None  # the stall going on now: how long since the job's last progress
    stall: str | None = None  # its verdict (analysis/stalls.py; job text inside: untrusted)


def _last(batch: pa.RecordBatch, name: str) -> list[Any]:
    return batch.column(name).to_pylist() if name in batch.schema.names else []


class LiveTail:
    """Polls a run directory; each :meth:`poll` returns the current :class:`LiveSnapshot`."""

    def __init__(self, run_dir: Path, started: float | None = None):
        self.run_dir = Path(run_dir)
        self.started = started if started is not None else time.monotonic()
        tails = RunTails(self.run_dir)
        self.events, self.gpu, self.host, self.procs = tails.events, tails.gpu, tails.host, tails.procs
        self.snap = LiveSnapshot(elapsed_s=0.0)
        self.stalls = StallTail(self.run_dir)

    def poll(self) -> LiveSnapshot:
        s = self.snap
        s.elapsed_s = time.monotonic() - self.started
        self.events.poll()
        pid = self.events.main_pid()
        if pid is not None:
            s.steps = self.events.counts[pid]
            s.step_time_s, s.data_wait_share, s.samples_per_s = window_stats(self.events.steps[pid],
                                                                              self.events.phases)
        for b in self.gpu.batches()[-1:]:
            t = _last(b, "t_ns")
            if not t:
                continue
            latest = [i for i, v in enumerate(t) if v == t[-1]]
            s.gpus = len(latest)

            def agg(name: str, how: Callable[[list[float]], float] = lambda xs: sum(xs) / len(xs)) -> float | None:
                vals = [v for i, v in enumerate(_last(b, name)) if i in latest and v is not None and v == v]
                return how(vals) if vals else None

            s.gpu_util, s.sm_active, s.power_w = agg("util_gpu"), agg("sm_active"), agg("power_w", sum)
        for b in self.host.batches()[-1:]:
            cpu = [v for v in _last(b, "cpu_pct") if v is not None]
            s.cpu_pct = cpu[-1] if cpu else s.cpu_pct
        for b in self.procs.batches()[-1:]:
            t, pids, cpu = _last(b, "t_ns"), _last(b, "pid"), _last(b, "cpu_pct")
            if not t:
                continue
            main, workers, nworkers = None, 0.0, 0
            ppids = _last(b, "ppid")
            for ti, p, c, pp in zip(t, pids, cpu, ppids or [None] * len(t)):
                if ti != t[-1] or c is None:
                    continue
                if p == pid:
                    main = c
                elif pid is not None and (self.events.roles.get(p) == "dataloader_worker" or pp == pid):
                    workers += c
                    nworkers += 1
            s.main_cpu_pct, s.workers_cpu_pct = main, (workers if nworkers else None)
        records = self.stalls.poll()
        s.stalls = len(records)
        going = [r for r in records if r.resumed_ns is None and r.ended_ns is None]
        s.stall_s = s.stall = None
        if going:
            v = judge(going[-1], time.time_ns())
            s.stall_s, s.stall = v.duration_s, v.sentence
        return s
