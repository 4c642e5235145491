"""Live numbers for ``gpusleuth run --live``, read from the run directory while the job writes it.

Runs in the launcher process (never in the job), so it cannot slow the training loop; it still keeps
its own cost small: each poll reads only the bytes appended since the last one (files are tailed by
offset — the hook's ``raw/events-*.tsv`` lines and the recorder's Arrow IPC streams, message by message),
keeps a few recent values, and computes window statistics over the last steps. A partial line or a
partial Arrow message at the end of a file is kept for the next poll.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from gpusleuth.analysis.steps import pick_main
from gpusleuth.sources.events import int_or_none, step_fields

WINDOW_STEPS = 20  # step statistics are over the most recent steps: what the job does *now*


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


class ArrowTail:
    """Reads the record batches appended to an Arrow IPC stream since the last call."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.schema: pa.Schema | None = None

    def batches(self) -> list[pa.RecordBatch]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        buf = pa.py_buffer(data)
        reader = pa.BufferReader(buf)
        out = []
        done = 0
        while done < len(data):
            try:
                msg = pa.ipc.read_message(reader)
            except (OSError, EOFError, pa.ArrowInvalid):
                break  # a partial message (or the end-of-stream marker): wait for more bytes
            if msg is None:
                break
            if msg.type == "schema":
                self.schema = pa.ipc.read_schema(msg)
            elif msg.type == "record batch" and self.schema is not None:
                out.append(pa.ipc.read_record_batch(msg, self.schema))
            done = reader.tell()
        self.offset += done
        return out


class _EventsTail:
    """Step lines (``S``) of the hook's event files, by process; tails each file by offset."""

    def __init__(self, raw: Path):
        self.raw = raw
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, bytes] = {}
        self.roles: dict[int, str] = {}
        self.steps: dict[int, deque] = {}
        self.counts: dict[int, int] = {}
        self.ranks: dict[int, int | None] = {}

    def poll(self) -> None:
        try:
            files = list(self.raw.glob("events-*.tsv"))
        except OSError:
            return
        for path in files:
            try:
                with open(path, "rb") as f:
                    f.seek(self.offsets.get(path, 0))
                    data = f.read()
            except OSError:
                continue
            if not data:
                continue
            self.offsets[path] = self.offsets.get(path, 0) + len(data)
            data = self.partial.pop(path, b"") + data
            lines = data.split(b"\n")
            if lines[-1]:
                self.partial[path] = lines[-1]
            try:
                pid = int(path.stem.split("-", 1)[1])
            except ValueError:
                continue
            for line in lines[:-1]:
                self._line(pid, line.decode("utf-8", "replace"))

    def _line(self, pid: int, line: str) -> None:
        kind, _, rest = line.partition("\t")
        if kind == "S":
            try:
                start, end, wait, _cpu, samples, *_ = step_fields(line.split("\t"))
            except (IndexError, ValueError):
                return
            self.steps.setdefault(pid, deque(maxlen=WINDOW_STEPS)).append((start, end, wait, samples))
            self.counts[pid] = self.counts.get(pid, 0) + 1
        elif kind == "H":
            try:
                head = json.loads(rest)
                self.roles[pid] = str(head.get("role") or "main")
                self.ranks[pid] = int_or_none(head.get("rank"))
            except (ValueError, AttributeError):
                pass

    def main_pid(self) -> int | None:
        """The same choice as the report's step view (``analysis/steps.pick_main``)."""
        pids = list(self.counts)
        return pick_main(pids, [self.counts[p] for p in pids], [self.ranks.get(p) for p in pids])


def _last(batch: pa.RecordBatch, name: str) -> list:
    return batch.column(name).to_pylist() if name in batch.schema.names else []


class LiveTail:
    """Polls a run directory; each :meth:`poll` returns the current :class:`LiveSnapshot`."""

    def __init__(self, run_dir: Path, started: float | None = None):
        self.run_dir = Path(run_dir)
        self.started = started if started is not None else time.monotonic()
        self.events = _EventsTail(self.run_dir / "raw")
        self.gpu = ArrowTail(self.run_dir / "gpu.arrows")
        self.host = ArrowTail(self.run_dir / "host.arrows")
        self.procs = ArrowTail(self.run_dir / "procs.arrows")
        self.snap = LiveSnapshot(elapsed_s=0.0)

    def poll(self) -> LiveSnapshot:
        s = self.snap
        s.elapsed_s = time.monotonic() - self.started
        self.events.poll()
        pid = self.events.main_pid()
        if pid is not None:
            win = list(self.events.steps[pid])
            s.steps = self.events.counts[pid]
            durs = sorted(e - b for b, e, _, _ in win)
            total = sum(durs)
            s.step_time_s = durs[len(durs) // 2] / 1e9 if durs else None
            s.data_wait_share = (sum(max(w, 0) for _, _, w, _ in win) / total) if total > 0 else None
            known = [(e - b, n) for b, e, _, n in win if n >= 0]
            t = sum(d for d, _ in known)
            s.samples_per_s = sum(n for _, n in known) / (t / 1e9) if known and t > 0 else None
        for b in self.gpu.batches()[-1:]:
            t = _last(b, "t_ns")
            if not t:
                continue
            latest = [i for i, v in enumerate(t) if v == t[-1]]
            s.gpus = len(latest)

            def agg(name: str, how=lambda xs: sum(xs) / len(xs)):
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
        return s
