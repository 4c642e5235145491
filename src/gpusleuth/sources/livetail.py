"""Tails of a run directory that is still being written: the recorder's Arrow IPC streams and the hook's
``raw/events-*.tsv`` lines, each read from where the last read stopped (a partial line or a partial Arrow
message at the end is kept for the next poll).

Shared by the live view (``report/live.py``, in the launcher), the live Prometheus exporter
(``recorder/exporter.py``, in the recorder) and the trainer callbacks (``integrations/``, inside the job,
reading the job's own event file): all want gpusleuth's own step numbers — the ones the final report is
made of — while the job runs, at the cost of reading only what was appended since the last look.
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

import pyarrow as pa

from gpusleuth.run.layout import EVENT_GLOB, RunDir
from gpusleuth.run.model import pick_main
from gpusleuth.sources.events import int_or_none, step_fields

WINDOW_STEPS = 20  # step statistics are over the most recent steps: what the job does *now*
MAX_PHASES = 10_000  # phases kept for carving the windows (a phase every step: 500 windows' worth)


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


class EventsTail:
    """Step lines (``S``) of the hook's event files, by process; tails each file by offset."""

    def __init__(self, raw: Path):
        self.raw = raw
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, bytes] = {}
        self.roles: dict[int, str] = {}
        self.steps: dict[int, deque[Any]] = {}
        self.counts: dict[int, int] = {}
        self.ranks: dict[int, int | None] = {}
        # (start_ns, end_ns) of every process's phases that ended, back to the oldest step of any window
        # (at most MAX_PHASES: a process that stopped stepping long ago keeps its window): the live window
        # carves them out of its steps as the report does (analysis/window.py)
        self.phases: deque[tuple[int, int]] = deque(maxlen=MAX_PHASES)

    def poll(self) -> None:
        try:
            files = list(self.raw.glob(EVENT_GLOB))
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
        if self.phases and self.steps:
            oldest = min(w[0][0] for w in self.steps.values() if w)
            self.phases = deque((p for p in self.phases if p[1] > oldest), maxlen=MAX_PHASES)

    def _line(self, pid: int, line: str) -> None:
        kind, _, rest = line.partition("\t")
        if kind == "S":
            try:
                start, end, wait, _cpu, samples, *_ = step_fields(line.split("\t"))
            except (IndexError, ValueError):
                return
            self.steps.setdefault(pid, deque(maxlen=WINDOW_STEPS)).append((start, end, wait, samples))
            self.counts[pid] = self.counts.get(pid, 0) + 1
        elif kind == "P":
            try:
                _name, start_s, end_s, *_ = rest.split("\t")
                self.phases.append((int(start_s), int(end_s)))
            except ValueError:
                return
        elif kind == "H":
            try:
                head = json.loads(rest)
                self.roles[pid] = str(head.get("role") or "main")
                self.ranks[pid] = int_or_none(head.get("rank"))
            except (ValueError, AttributeError):
                pass

    def main_pid(self) -> int | None:
        """The same choice as the report's step view (``run/model.pick_main``)."""
        pids = list(self.counts)
        return pick_main(pids, [self.counts[p] for p in pids], [self.ranks.get(p) for p in pids])


class StepTotals(EventsTail):
    """The live view's tail of the hook's event files, plus the run totals a counter needs."""

    def __init__(self, raw: Path):
        super().__init__(raw)
        self.rank_labels: dict[int, str] = {}  # the "rank" label of each process's metrics
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
                start, end, wait, _cpu, samples, opt, *_ = step_fields(line.split("\t"))
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
                self.rank_labels[pid] = str(rank) if rank not in (None, "") else "0"
        except (IndexError, ValueError, AttributeError):
            return  # a partial or foreign line: the finished run's parser counts it as a loss


class RunTails:
    """The tails of a run directory still being written: the hook's events and the telemetry streams."""

    def __init__(self, run_dir: Path):
        layout = RunDir(run_dir)
        self.events = EventsTail(layout.raw)
        self.gpu = ArrowTail(layout.stream("gpu"))
        self.host = ArrowTail(layout.stream("host"))
        self.procs = ArrowTail(layout.stream("procs"))
