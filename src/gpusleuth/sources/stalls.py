"""The stall watch's reading: the hook's event lines tailed for progress while the job runs (``ProgressTail``),
the two stack formats it captures (py-spy's ``dump``, faulthandler's), and a finished run's stall records
(``read_stalls``: ``stalls/stalls.jsonl`` and the stack files beside it → ``run/stalls.StallRecord``).

Reading never writes. A stack file is the job's text: it is parsed, never trusted (see render/text.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gpusleuth.run.layout import RunDir
from gpusleuth.run.stalls import FlightRing, Frame, ProcessStacks, StalledProcess, StallRecord, ThreadStack
from gpusleuth.sources.flight_recorder import ring_from_snapshot
from gpusleuth.sources.livetail import EventsTail

RECOVERY_AFTER_NS = 1_000_000_000  # the hook's flush period (0.5 s) and a short step's worth of margin
MAX_STACK_BYTES = 4 << 20  # a stack file larger than this is read up to here (a runaway dump)

_PYSPY_THREAD = re.compile(r'^Thread (\S+)(?: \(([^)]*)\))?:?(?: "(.*)")?\s*$')
_PYSPY_FRAME = re.compile(r"^\s+(.*) \((.*?)(?::(\d+))?\)\s*$")
_FH_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)")
_FH_FRAME = re.compile(r'^\s+File "(.*)", line (\d+|\?\?\?) in (.*)$')


class ProgressTail(EventsTail):
    """Per process of the job: its steps (count, recent durations: ``EventsTail``), its last progress (a step's
    end, a phase's begin or end), the phases it is inside now, whether it has exited."""

    def __init__(self, raw: Path):
        super().__init__(raw)
        self.progress_ns: dict[int, int] = {}
        self.open_phases: dict[int, dict[str, int]] = {}  # pid → phase name → open count
        self.exited: set[int] = set()
        # recovery: pid → the moment it stalled; the first step *started* after it (or a phase begun after it)
        # is progress again. The step the stall sat in ends late but started before; and a process ended
        # while stuck writes its unfinished step at exit, which started before too — neither is a recovery.
        # The hook flushes step lines at most every 0.5 s: steps it held when the job stopped started up to
        # that much after the last progress seen, so a recovery must start RECOVERY_AFTER_NS past it.
        self.stalled_at: dict[int, int] = {}
        self.resumed_ns: dict[int, int] = {}

    def watch_recovery(self, pid: int, since_ns: int) -> None:
        self.stalled_at[pid] = since_ns
        self.resumed_ns.pop(pid, None)

    def _resumed(self, pid: int, start_ns: int) -> None:
        at = self.stalled_at.get(pid)
        if at is not None and start_ns > at + RECOVERY_AFTER_NS and pid not in self.resumed_ns:
            self.resumed_ns[pid] = start_ns

    def _line(self, pid: int, line: str) -> None:
        super()._line(pid, line)
        f = line.rstrip("\n").split("\t")
        try:
            if f[0] == "S" and pid in self.steps and self.steps[pid]:
                self._progress(pid, self.steps[pid][-1][1])
                self._resumed(pid, self.steps[pid][-1][0])
            elif f[0] == "B":
                opened = self.open_phases.setdefault(pid, {})
                opened[f[1]] = opened.get(f[1], 0) + 1
                self._progress(pid, int(f[2]))
                self._resumed(pid, int(f[2]))
            elif f[0] == "P":
                opened = self.open_phases.setdefault(pid, {})
                if opened.get(f[1], 0) > 0:
                    opened[f[1]] -= 1
                self._progress(pid, int(f[3]))
            elif f[0] == "X":
                self.exited.add(pid)
        except (IndexError, ValueError):
            return  # a partial or foreign line

    def _progress(self, pid: int, t_ns: int) -> None:
        if t_ns > self.progress_ns.get(pid, 0):
            self.progress_ns[pid] = t_ns

    def in_phase(self, pid: int) -> list[str]:
        return [name for name, n in self.open_phases.get(pid, {}).items() if n > 0]

    def step_times_s(self, pid: int) -> list[float]:
        return [(end - start) / 1e9 for start, end, *_ in self.steps.get(pid, ())]


# -- stack text ---------------------------------------------------------------------------------------------
def parse_pyspy(text: str) -> list[ThreadStack]:
    """``py-spy dump`` text: ``Thread <tid> (<state>): "<name>"`` then ``    func (file:line)``, innermost first."""
    threads: list[ThreadStack] = []
    for raw in text.splitlines():
        m = _PYSPY_THREAD.match(raw)
        if m:
            name = m.group(3) or m.group(1)
            threads.append(ThreadStack(name=name, frames=[], main=name == "MainThread"))
            continue
        fm = _PYSPY_FRAME.match(raw)
        if fm and threads:
            threads[-1].frames.append(Frame(fm.group(1).strip(), fm.group(2), int(fm.group(3)) if fm.group(3) else None))
    return threads


def parse_faulthandler(text: str) -> list[ThreadStack]:
    """faulthandler's text: ``Thread 0x…``/``Current thread 0x… (most recent call first):`` then
    ``  File "f", line N in func``. The interpreter lists threads newest first: the main thread is the last."""
    threads: list[ThreadStack] = []
    for raw in text.splitlines():
        m = _FH_THREAD.match(raw)
        if m:
            threads.append(ThreadStack(name=f"{m.group(1)} {m.group(2)}", frames=[]))
            continue
        fm = _FH_FRAME.match(raw)
        if fm and threads:
            line = int(fm.group(2)) if fm.group(2).isdigit() else None
            threads[-1].frames.append(Frame(fm.group(3).strip(), fm.group(1), line))
    if threads:
        threads[-1].main = True
    return threads


def parse_stacks(text: str, via: str) -> list[ThreadStack]:
    return parse_pyspy(text) if via == "py-spy" else parse_faulthandler(text)


# -- a finished (or running) run's stall records ------------------------------------------------------------
def _read_text(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(MAX_STACK_BYTES).decode("utf-8", "replace")
    except OSError:
        return None


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _float(v: Any) -> float | None:
    try:
        return float(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _record(d: dict[str, Any], run_dir: Path, losses: list[str]) -> StallRecord | None:
    sid, seen, since = _int(d.get("id")), _int(d.get("seen_ns")), _int(d.get("since_ns"))
    if sid is None or seen is None or since is None:
        return None
    procs = []
    for p in d.get("processes") or []:
        if not isinstance(p, dict) or _int(p.get("pid")) is None:
            continue
        procs.append(StalledProcess(
            pid=int(p["pid"]), rank=_int(p.get("rank")), role=str(p.get("role") or "main"),
            steps=_int(p.get("steps")) or 0, last_progress_ns=_int(p.get("last_progress_ns")) or since,
            stalled=bool(p.get("stalled")), step_s=_float(p.get("step_s"))))
    stacks = []
    for s in d.get("stacks") or []:
        if not isinstance(s, dict) or _int(s.get("pid")) is None:
            continue
        via = str(s.get("via") or "")
        ps = ProcessStacks(pid=int(s["pid"]), via=via, path=s.get("path"), error=s.get("error"),
                           ppid=_int(s.get("ppid")), role=str(s["role"]) if s.get("role") else None)
        if ps.path:
            target = (run_dir / str(ps.path)).resolve()
            if run_dir.resolve() not in target.parents:
                losses.append(f"stall {sid}: stack file {ps.path!r} is outside the run directory; skipped")
                continue
            text = _read_text(target)
            if text is None:
                ps.error = ps.error or f"{ps.path} could not be read"
            else:
                ps.threads = parse_stacks(text, via)
        stacks.append(ps)
    flight = []
    for f in d.get("flight") or []:
        if not isinstance(f, dict) or _int(f.get("pid")) is None:
            continue
        ring = FlightRing(pid=int(f["pid"]), path=f.get("path"), error=f.get("error"))
        if ring.path:
            target = (run_dir / str(ring.path)).resolve()
            text = _read_text(target) if run_dir.resolve() in target.parents else None
            if text is None:
                losses.append(f"stall {sid}: flight recorder file {ring.path!r} could not be read; skipped")
            else:
                try:
                    read = ring_from_snapshot(ring.pid, text)
                    ring.entries, ring.groups, ring.error = read.entries, read.groups, ring.error or read.error
                except ValueError:
                    losses.append(f"stall {sid}: flight recorder file {ring.path!r} is not JSON; skipped")
        flight.append(ring)
    return StallRecord(id=sid, seen_ns=seen, since_ns=since, threshold_s=_float(d.get("threshold_s")) or 0.0,
                       processes=procs, stacks=stacks, action=str(d.get("action") or "dump"), flight=flight)


class StallTail:
    """The stall records of a run being recorded, read again whenever the file grew (a stall writes a few
    lines; the live view asks twice a second)."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.size = -1
        self.records: list[StallRecord] = []

    def poll(self) -> list[StallRecord]:
        try:
            size = RunDir(self.run_dir).stalls_log.stat().st_size
        except OSError:
            return self.records
        if size != self.size:
            self.size = size
            self.records = read_stalls(self.run_dir)
        return self.records


def read_stalls(run_dir: Path, losses: list[str] | None = None) -> list[StallRecord]:
    """Every stall the recorder saw, with its end: ``resumed`` lines mark recovery, ``ended`` lines a job that
    ended still stuck. No file: no stall was seen (or the watch was off)."""
    losses = losses if losses is not None else []
    path = RunDir(run_dir).stalls_log
    text = _read_text(path)
    if text is None:
        return []
    out: dict[int, StallRecord] = {}
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if not isinstance(d, dict):
            bad += 1
            continue
        kind, sid = d.get("kind"), _int(d.get("id"))
        if kind == "stall":
            rec = _record(d, run_dir, losses)
            if rec is None:
                bad += 1
            else:
                out[rec.id] = rec
        elif kind in ("resumed", "ended") and sid in out:
            t = _int(d.get("t_ns"))
            if kind == "resumed":
                out[sid].resumed_ns = t
            else:
                out[sid].ended_ns = t
        else:
            bad += 1
    if bad:
        losses.append(f"{path.name}: {bad} unreadable line(s) skipped")
    return [out[k] for k in sorted(out)]
