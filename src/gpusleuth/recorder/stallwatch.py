"""The stall watch: in the recorder process (never the job), the job's progress per process, and — when it
stops, while it is still stuck — every process's Python stacks into the run directory and one line on the
terminal.

Progress is what the hook already writes: step ends (``S``), phase begins and ends (``B``/``P``, written and
flushed at once), tailed from ``raw/events-*.tsv`` by offset once a second (``sources/stalls.ProgressTail``).
A process that records steps is stalled when nothing came from it for longer than its threshold: by default
max(``floor``, ``factor`` × its recent median step time) — ``--stall-after S`` fixes it — and never while it is
inside a phase it opened (a long evaluation or checkpoint is work, not a stall).

When one stalls: stacks of every live process the hook entered (ranks, the launcher agent, DataLoader workers),
all threads — by ``py-spy dump`` when it is installed (it reads the process from outside, the interpreter may be
blocked in C), else by the signal the hook registered with ``faulthandler`` (its C handler writes while the main
thread sits in a C call; see hook/_gpusleuth_stall.py). Nothing here needs the stuck process's GIL. The record
goes to ``stalls/stalls.jsonl`` (stacks in ``stalls/<id>/stacks-<pid>.txt``); when progress returns a
``resumed`` line follows, and a job that ends still stuck gets ``ended``. ``--on-stall kill`` then asks the
launcher to end the job (``stalls/stop``), which ends it as ``--duration`` does.

The verdict on the terminal is the report's (``analysis/stalls.judge``), on the same record.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpusleuth.analysis.stalls import judge
from gpusleuth.run.layout import RunDir
from gpusleuth.run.stalls import FlightRing, ProcessStacks, StalledProcess, StallRecord
from gpusleuth.sources.flight_recorder import ring_from_snapshot
from gpusleuth.sources.stalls import ProgressTail, parse_stacks

if TYPE_CHECKING:
    from gpusleuth.recorder.exporter import LiveMetrics

CHECK_EVERY_S = 1.0
FLOOR_S = 10.0
FACTOR = 5.0
PYSPY_TIMEOUT_S = 20.0
SIGNAL_WAIT_S = 2.0  # faulthandler writes within milliseconds; a process that never answers is said so
ENV_PYSPY = "GPUSLEUTH_PYSPY"  # 0: never use py-spy (the faulthandler path)
FLIGHT_WAIT_S = 2.0  # the hook's Flight Recorder thread needs the GIL: a process that holds it is not waited for
FLIGHT_SOCKET = "gpusleuth-fr-%d"  # hook/_gpusleuth_stall.py's abstract socket


def flight_snapshot(pid: int, timeout_s: float = FLIGHT_WAIT_S) -> tuple[str | None, str | None]:
    """Ask ``pid``'s hook for its Flight Recorder ring: (JSON text, None), (None, why), or (None, None) when the
    process keeps no ring (no socket: the job did not turn the Flight Recorder on)."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError as exc:
        return None, str(exc)
    with sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect("\0" + FLIGHT_SOCKET % pid)
        except (ConnectionRefusedError, FileNotFoundError):
            return None, None
        except OSError as exc:
            return None, f"flight recorder: {exc}"
        chunks: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                b = sock.recv(1 << 16)
                if not b:
                    return b"".join(chunks).decode("utf-8", "replace"), None
                chunks.append(b)
        except OSError as exc:
            return None, f"flight recorder: no answer within {timeout_s:g} s ({exc})"
        return None, f"flight recorder: no answer within {timeout_s:g} s"


def safe(text: str) -> str:
    """Job text (file and function names) for a terminal: control, escape and bidi characters escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


_BUFFER = re.compile(r"^/memfd:gpusleuth-stacks-sig(\d+)")


def stack_buffer(pid: int) -> tuple[Path, int] | None:
    """The hook's faulthandler buffer in ``pid`` (hook/_gpusleuth_stall.py): its /proc path and signal."""
    try:
        entries = list(os.scandir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    for e in entries:
        try:
            m = _BUFFER.match(os.readlink(e.path))
        except OSError:
            continue
        if m:
            return Path(e.path), int(m.group(1))
    return None


def descendants(root: int) -> set[int]:
    """Every live process below ``root`` (from /proc's parent links, read once)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return set()
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out: set[int] = set()
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def pyspy_path() -> str | None:
    if os.environ.get(ENV_PYSPY, "").strip().lower() in ("0", "off", "no", "false"):
        return None
    return shutil.which("py-spy")


class StallWatch:
    def __init__(self, run_dir: Path, after_s: float | None = None, on_stall: str = "dump",
                 say_fd: int | None = None, metrics: LiveMetrics | None = None, floor_s: float = FLOOR_S, factor: float = FACTOR):
        self.run_dir = Path(run_dir)
        self.layout = RunDir(self.run_dir)
        self.after_s = after_s
        self.on_stall = on_stall
        self.say_fd = say_fd
        self.metrics = metrics
        self.floor_s = floor_s
        self.factor = factor
        self.tail = ProgressTail(self.layout.raw)
        self.pyspy = pyspy_path()
        self.open: StallRecord | None = None
        self.count = 0
        self.last_check = 0.0
        self.cpu_s = 0.0  # the watch's own CPU time (thread clock), reported in recorder.json
        self.dumping: threading.Thread | None = None
        self.root: int | None = None  # the job's first process (the recorder's `pid` line)
        self._lock = threading.Lock()

    # -- the check -----------------------------------------------------------------------------------
    def threshold_s(self, pid: int) -> float:
        if self.after_s is not None:
            return self.after_s
        times = self.tail.step_times_s(pid)
        return max(self.floor_s, self.factor * statistics.median(times)) if times else self.floor_s

    def tick(self, now_ns: int | None = None, force: bool = False) -> None:
        mono = time.monotonic()
        if not force and mono - self.last_check < CHECK_EVERY_S:
            return
        self.last_check = mono
        c0 = time.thread_time()
        try:
            self._check(now_ns if now_ns is not None else time.time_ns())
        finally:
            self.cpu_s += time.thread_time() - c0

    def watched(self) -> list[int]:
        t = self.tail
        return [pid for pid, n in t.counts.items()
                if n > 0 and t.roles.get(pid, "main") != "dataloader_worker" and pid not in t.exited and _alive(pid)]

    def _check(self, now: int) -> None:
        self.tail.poll()
        pids = self.watched()
        stalled = {pid: self.tail.progress_ns.get(pid, 0) for pid in pids
                   if not self.tail.in_phase(pid) and now - self.tail.progress_ns.get(pid, now) > self.threshold_s(pid) * 1e9}
        try:
            self._judge(now, pids, stalled)
        finally:
            if self.metrics is not None:  # after the judging: a stall opened now is in this scrape
                self.metrics.observe_progress({
                    pid: (self.tail.ranks.get(pid), (now - self.tail.progress_ns.get(pid, now)) / 1e9, pid in stalled)
                    for pid in pids}, self.count, (now - self.open.since_ns) / 1e9 if self.open else 0.0)

    def _judge(self, now: int, pids: list[int], stalled: dict[int, int]) -> None:
        rec = self.open
        if rec is None:
            if stalled:
                self._open(now, pids, stalled)
            return
        if self.dumping is not None and self.dumping.is_alive():
            return
        was = [p for p in rec.processes if p.stalled]
        moved = [p for p in was if p.pid in self.tail.resumed_ns]
        # recovered: every stalled process made progress again (one that exited since counts if it moved first)
        if moved and all(p in moved or p.pid not in pids for p in was):
            resumed = min(self.tail.resumed_ns[p.pid] for p in moved)
            self._append({"kind": "resumed", "id": rec.id, "t_ns": resumed})
            self._say(f"gpusleuth: stall {rec.id} recovered: progress again after "
                      f"{(resumed - rec.since_ns) / 1e9:.0f} s stopped")
            self.open = None

    def _open(self, now: int, pids: list[int], stalled: dict[int, int]) -> None:
        self.count += 1
        t = self.tail
        procs = []
        for pid in pids:
            times = t.step_times_s(pid)
            procs.append(StalledProcess(
                pid=pid, rank=t.ranks.get(pid), role=t.roles.get(pid, "main"), steps=t.counts.get(pid, 0),
                last_progress_ns=t.progress_ns.get(pid, 0), stalled=pid in stalled,
                step_s=statistics.median(times) if times else None))
        rec = StallRecord(id=self.count, seen_ns=now, since_ns=min(stalled.values()),
                          threshold_s=max(self.threshold_s(p) for p in stalled), processes=procs,
                          action=self.on_stall)
        self.open = rec
        for p in procs:
            if p.stalled:
                t.watch_recovery(p.pid, p.last_progress_ns)
        self.dumping = threading.Thread(target=self._dump_and_say, args=(rec,), name="gpusleuth-stall", daemon=True)
        self.dumping.start()

    # -- stacks ----------------------------------------------------------------------------------
    def targets(self) -> list[int]:
        """Every live process the hook entered: those with an events file, and the job's processes that hold
        the hook's stack buffer (one that has written no event yet)."""
        pids = set()
        for path in list(self.tail.offsets):
            try:
                pids.add(int(path.stem.split("-", 1)[1]))
            except (IndexError, ValueError):
                continue
        if self.root is not None:
            pids |= {p for p in descendants(self.root) | {self.root} if p not in pids and stack_buffer(p)}
        return sorted(p for p in pids if _alive(p) and p not in self.tail.exited and p != os.getpid())

    def _dump_and_say(self, rec: StallRecord) -> None:
        try:
            out = self.layout.stalls_dir / str(rec.id)
            out.mkdir(parents=True, exist_ok=True)
            t0 = time.monotonic()
            rec.stacks = self.dump(self.targets(), out)
            dump_s = time.monotonic() - t0
            for s in rec.stacks:
                s.ppid, s.role = _ppid(s.pid), self.tail.roles.get(s.pid)
            t1 = time.monotonic()
            rec.flight = self.flight([p.pid for p in rec.processes], out)
            flight_s = time.monotonic() - t1
            self._append({"kind": "stall", **asdict(rec), "stacks": [
                {"pid": s.pid, "via": s.via, "path": s.path, "error": s.error, "ppid": s.ppid, "role": s.role}
                for s in rec.stacks], "flight": [{"pid": f.pid, "path": f.path, "error": f.error} for f in rec.flight],
                "dump_s": round(dump_s, 3), "flight_s": round(flight_s, 3)})
            self._say(self.line(rec))
            if self.on_stall == "kill":
                self.layout.stall_stop.write_text(f"stall {rec.id}\n")
        except Exception as exc:  # noqa: BLE001 - the watch must never end the recording
            self._say(f"gpusleuth: stall {rec.id} seen, but its stacks could not be saved: {exc}")

    def dump(self, pids: list[int], out: Path) -> list[ProcessStacks]:
        """py-spy for each process when it is there; the hook's signal for those it could not read."""
        got: list[ProcessStacks] = []
        todo: dict[int, str | None] = {}
        for pid in pids:
            text, err = self._pyspy(pid) if self.pyspy else (None, None)
            if text is not None:
                got.append(self._save(pid, "py-spy", text, out))
            else:
                todo[pid] = err
        got += self._faulthandler(list(todo), out, todo)
        return sorted(got, key=lambda s: s.pid)

    def flight(self, pids: list[int], out: Path) -> list[FlightRing]:
        """torch's Flight Recorder ring of each watched process that keeps one, asked for all at once."""
        got: dict[int, tuple[str | None, str | None]] = {}

        def ask(pid: int) -> None:
            got[pid] = flight_snapshot(pid)

        threads = [threading.Thread(target=ask, args=(pid,), daemon=True) for pid in pids if _alive(pid)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(FLIGHT_WAIT_S + 1)
        rings = []
        for pid, (text, err) in sorted(got.items()):
            if text is None and err is None:
                continue  # no ring kept there
            if text is None:
                rings.append(FlightRing(pid=pid, error=err))
                continue
            path = out / f"flight-{pid}.json"
            path.write_text(text)
            try:
                ring = ring_from_snapshot(pid, text)
            except ValueError as exc:
                ring = FlightRing(pid=pid, error=f"flight recorder: unreadable answer ({exc})")
            ring.path = str(path.relative_to(self.run_dir))
            rings.append(ring)
        return rings

    def _pyspy(self, pid: int) -> tuple[str | None, str | None]:
        try:
            res = subprocess.run([self.pyspy or "py-spy", "dump", "--pid", str(pid), "--full-filenames"],
                                 capture_output=True, text=True, errors="replace", timeout=PYSPY_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"py-spy: {exc}"
        if res.returncode != 0 or not parse_stacks(res.stdout, "py-spy"):
            return None, "py-spy: " + (res.stderr.strip().splitlines() or [f"exit {res.returncode}"])[0][:200]
        return res.stdout, None

    def _faulthandler(self, pids: list[int], out: Path, errors: dict[int, str | None]) -> list[ProcessStacks]:
        sent: dict[int, tuple[Path, int]] = {}
        got: list[ProcessStacks] = []
        for pid in pids:
            found = stack_buffer(pid)
            try:
                if found is None:
                    raise LookupError(pid)
                path, signum = found
                size = os.stat(path).st_size
                os.kill(pid, signum)
                sent[pid] = (path, size)
            except (OSError, LookupError):
                why = "no stack signal registered (the hook did not enter it, or the job took its signal)"
                got.append(ProcessStacks(pid=pid, via="faulthandler",
                                         error="; ".join(x for x in (errors.get(pid), why) if x)))
        deadline = time.monotonic() + SIGNAL_WAIT_S
        pending = dict(sent)
        texts: dict[int, str] = {}
        while pending and time.monotonic() < deadline:
            time.sleep(0.05)
            for pid, (path, size) in list(pending.items()):
                try:
                    now = os.stat(path).st_size
                    if now > size:
                        time.sleep(0.05)  # the handler writes in a few calls: let it finish
                        with open(path, "rb") as f:
                            f.seek(size)
                            texts[pid] = f.read().decode("utf-8", "replace")
                        del pending[pid]
                except OSError:
                    continue
        for pid in sent:
            if pid in texts:
                got.append(self._save(pid, "faulthandler", texts[pid], out))
            else:
                got.append(ProcessStacks(pid=pid, via="faulthandler",
                                         error=f"no stack written within {SIGNAL_WAIT_S:g} s of the signal"))
        return got

    def _save(self, pid: int, via: str, text: str, out: Path) -> ProcessStacks:
        path = out / f"stacks-{pid}.txt"
        path.write_text(text)
        return ProcessStacks(pid=pid, via=via, threads=parse_stacks(text, via),
                             path=str(path.relative_to(self.run_dir)))

    # -- saying ---------------------------------------------------------------------------------
    def line(self, rec: StallRecord) -> str:
        v = judge(rec, time.time_ns())
        stopped = sorted((p for p in rec.processes if p.stalled), key=lambda p: (p.rank is None, p.rank or 0, p.pid))
        names = ", ".join(f"rank {p.rank}" if p.rank is not None else f"pid {p.pid}" for p in stopped)
        since = time.strftime("%H:%M:%S", time.localtime(rec.since_ns / 1e9))
        how = "py-spy" if "py-spy" in v.via else "faulthandler" if v.via else "none taken"
        tail = " — ending the job (--on-stall kill)" if rec.action == "kill" else ""
        return safe(f"gpusleuth: STALL {rec.id}: {names} made no progress since {since} "
                    f"({(rec.seen_ns - rec.since_ns) / 1e9:.0f} s, threshold {rec.threshold_s:.0f} s). "
                    f"{v.sentence}. " + (f"{v.flight}. " if v.flight else "") +
                    f"Stacks of {v.stacks_taken} process(es) ({how}): "
                    f"{self.layout.stalls_dir / str(rec.id)}{tail}")

    def _say(self, text: str) -> None:
        if self.say_fd is None:
            return
        try:
            os.write(self.say_fd, (text + "\n").encode("utf-8", "replace"))
        except OSError:
            pass

    def _append(self, obj: dict[str, Any]) -> None:
        with self._lock:
            self.layout.stalls_dir.mkdir(parents=True, exist_ok=True)
            with open(self.layout.stalls_log, "a") as f:
                f.write(json.dumps(obj, default=str) + "\n")

    def close(self) -> None:
        """The recording ends: a stall still open ended with the job."""
        if self.dumping is not None:
            self.dumping.join(timeout=PYSPY_TIMEOUT_S)
        if self.open is not None:
            self.tick(force=True)  # the job's last lines may say it moved again before it ended
        if self.open is not None:
            self._append({"kind": "ended", "id": self.open.id, "t_ns": time.time_ns()})
            self.open = None

    def status(self) -> dict[str, Any]:
        return {"after_s": self.after_s, "on_stall": self.on_stall, "stalls": self.count,
                "py_spy": self.pyspy is not None, "cpu_s": round(self.cpu_s, 4)}
