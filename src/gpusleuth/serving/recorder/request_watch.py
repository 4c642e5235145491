"""The stall watch for servers under ``gpusleuth load`` (issue 33): requests outstanding, and nothing coming
back — no answer ending, no token of a stream — for longer than the threshold, said while it lasts.

Progress is what the load generator sees: a request's start, each token event of a stream (``OpenAIAnswer``'s
``token_ns``, read, not copied), a request's end. The server is **stalled** when requests are outstanding and
the newest progress of all of them is older than the threshold — one slow request while others stream is a
queue, not a stall. The threshold adapts like the training watch's: max(10 s, 5 × the median of the longest
silence inside each recent request — its time to first token or answer, or its widest gap between tokens);
``gpusleuth load --stall-after`` fixes it (seconds, or ``off``), else ``GPUSLEUTH_LOAD_STALL_AFTER`` does.

When it stalls: the same terminal line as ``gpusleuth run``'s (``gpusleuth: STALL 1: …``); with a server
started under recording (``gpusleuth load … -- CMD``), every server process the hook entered gets its stacks
taken as the training watch takes them (py-spy, else the hook's faulthandler signal: recorder/stallwatch.py),
and the record goes to the run's ``stalls/stalls.jsonl``, so the report's ``hang`` finding and the live view
read it like a training job's. Progress again writes ``resumed``; the load ending still stuck writes ``ended``.
The watch is one thread that looks once a second; the generator's only addition per request is two dict
operations under a lock.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from collections import deque
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from gpusleuth.run.layout import RunDir
from gpusleuth.run.stalls import StalledProcess, StallRecord
from gpusleuth.serving.recorder.openai_api import OpenAIAnswer

ENV_AFTER = "GPUSLEUTH_LOAD_STALL_AFTER"
FLOOR_S = 10.0
FACTOR = 5.0
CHECK_EVERY_S = 1.0
RECENT = 200  # requests whose silences set the threshold


def after_from(setting: str | None = None) -> tuple[bool, float | None]:
    """(on, fixed threshold) from ``--stall-after`` (``setting``), else ``GPUSLEUTH_LOAD_STALL_AFTER``: unset or
    auto → (True, None); off → (False, None); seconds → (True, seconds)."""
    raw = (setting if setting is not None else os.environ.get(ENV_AFTER) or "").strip().lower()
    if raw in ("", "auto"):
        return True, None
    if raw in ("off", "0", "no", "false"):
        return False, None
    try:
        v = float(raw)
    except ValueError:
        return True, None
    return (True, v) if v > 0 and v != float("inf") else (True, None)


def _run_dir_of(pids: list[int]) -> Path | None:
    """The run directory the launcher gave the server (its ``GPUSLEUTH_RUN_DIR``): the generator runs in the
    launcher's process, which chooses the directory inside ``launch``."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                for item in f.read().split(b"\0"):
                    if item.startswith(b"GPUSLEUTH_RUN_DIR="):
                        path = Path(os.fsdecode(item.split(b"=", 1)[1]))
                        return path if path.is_dir() else None
        except OSError:
            continue
    return None


def request_watch(say: Callable[[str], None] | None, setting: str | None = None) -> "RequestWatch | None":
    """The watch ``gpusleuth load``'s generator keeps, unless ``--stall-after off`` (``setting``; None: the
    environment's ``GPUSLEUTH_LOAD_STALL_AFTER``) switches it off."""
    on, after = after_from(setting)
    return RequestWatch(say, after_s=after) if on else None


class RequestWatch:
    def __init__(self, say: Callable[[str], None] | None = None, run_dir: Path | None = None,
                 after_s: float | None = None, floor_s: float = FLOOR_S, factor: float = FACTOR,
                 root_pid: int | None = None):
        self.say, self.after_s, self.floor_s, self.factor = say, after_s, floor_s, factor
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.root_pid = root_pid if root_pid is not None else os.getpid()  # the server is our child
        self._lock = threading.Lock()
        self._open: dict[int, tuple[int, OpenAIAnswer | None]] = {}  # key → (start_ns, an LLM answer or None)
        self._keys = 0
        self.last_end_ns = 0
        self.silences: deque[float] = deque(maxlen=RECENT)
        self.stall: StallRecord | None = None
        self.count = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the generator's side ---------------------------------------------------------------------------
    def begin(self, start_ns: int, answer: OpenAIAnswer | None = None) -> int:
        with self._lock:
            self._keys += 1
            self._open[self._keys] = (start_ns, answer)
            return self._keys

    def end(self, key: int, answered: bool = True, end_ns: int | None = None) -> None:
        """The request is over; ``answered``: the server answered it (a client-side timeout, a refused connection
        or an abandoned request is no progress of the server's)."""
        end_ns = end_ns if end_ns is not None else time.time_ns()
        with self._lock:
            opened = self._open.pop(key, None)
            if answered:
                self.last_end_ns = max(self.last_end_ns, end_ns)
        if opened is None or not answered:
            return
        start, answer = opened
        marks = [start, *(answer.token_ns if answer is not None else ()), end_ns]
        self.silences.append(max(b - a for a, b in zip(marks, marks[1:])) / 1e9)

    # -- the check ------------------------------------------------------------------------------------
    def threshold_s(self) -> float:
        if self.after_s is not None:
            return self.after_s
        return max(self.floor_s, self.factor * statistics.median(self.silences)) if self.silences else self.floor_s

    def progress(self) -> tuple[int, int, int]:
        """(requests outstanding, the server's newest progress — an answer ended or a token came —, the oldest
        outstanding request's start)."""
        with self._lock:
            items = list(self._open.values())
            last = self.last_end_ns
        for _start, answer in items:
            tokens = answer.token_ns if answer is not None else None
            if tokens:
                last = max(last, tokens[-1])
        return len(items), last, min((st for st, _ in items), default=0)

    def check(self, now_ns: int | None = None) -> None:
        now = now_ns if now_ns is not None else time.time_ns()
        n, last, oldest = self.progress()
        if self.stall is not None:
            if last > self.stall.since_ns:
                self._append({"kind": "resumed", "id": self.stall.id, "t_ns": last})
                self._say(f"stall {self.stall.id} recovered: the server answered again after "
                          f"{(last - self.stall.since_ns) / 1e9:.0f} s without progress")
                self.stall = None
            return
        # progress stopped from the later of its last sign and the oldest request still waiting (an idle
        # server's first request is not late before it was sent)
        since = max(last, oldest)
        thr = self.threshold_s()
        if n and now - since > thr * 1e9:
            self._open_stall(now, since, n, thr)

    def _open_stall(self, now: int, since: int, n: int, thr: float) -> None:
        self.count += 1
        rec = StallRecord(id=self.count, seen_ns=now, since_ns=since, threshold_s=thr, processes=[])
        self.stall = rec
        try:
            where = self._dump(rec)
        except Exception as exc:  # noqa: BLE001 - the watch never ends the load
            where = f" Stacks could not be taken: {exc}."
        since_s = time.strftime("%H:%M:%S", time.localtime(since / 1e9))
        self._say(f"STALL {rec.id}: the server made no progress on {n} outstanding request(s) since "
                  f"{since_s} ({(now - since) / 1e9:.0f} s, threshold {thr:.0f} s): no answer ended and no token "
                  f"came.{where}")

    def _dump(self, rec: StallRecord) -> str:
        from gpusleuth.analysis.stalls import handler_places, handler_text
        from gpusleuth.recorder.stallwatch import StallWatch, descendants, stack_buffer
        from gpusleuth.recorder.stallwatch import safe

        pids = sorted(p for p in descendants(self.root_pid) if stack_buffer(p) is not None)
        if self.run_dir is None:
            self.run_dir = _run_dir_of(pids)
        if self.run_dir is None:
            return ""
        sw = StallWatch(self.run_dir)
        rec.processes = [StalledProcess(pid=p, rank=None, role="server", steps=0, last_progress_ns=rec.since_ns,
                                        stalled=True) for p in pids]
        out = sw.layout.stalls_dir / str(rec.id)
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        rec.stacks = sw.dump(pids, out)
        self._append({"kind": "stall", **asdict(rec), "stacks": [
            {"pid": s.pid, "via": s.via, "path": s.path, "error": s.error, "ppid": None, "role": "server"}
            for s in rec.stacks], "flight": [], "dump_s": round(time.monotonic() - t0, 3), "source": "load"})
        # a server's work is on its request handlers' threads, not its main thread's accept loop: where they stand
        # comes first (the verdict's place, analysis/stalls.handler_places), then its other threads in its own code
        # (a model thread holding the lock the handlers wait on)
        handlers: dict[str, int] = {}
        others: dict[str, int] = {}
        for st in rec.stacks:
            for into, places in zip((handlers, others), handler_places(st)):
                for where, n in places:
                    into[where] = into.get(where, 0) + n

        def ranked(d: dict[str, int]) -> list[tuple[str, int]]:
            return sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))

        said = f" Request handlers at {handler_text(ranked(handlers)) or 'none seen'}."
        if others:
            said += f" Other threads in its own code: {handler_text(ranked(others))}."
        return safe(f"{said} Stacks of {sum(1 for x in rec.stacks if x.threads)} server process(es): {out}")

    # -- the thread ---------------------------------------------------------------------------------------
    def start(self) -> "RequestWatch":
        self._thread = threading.Thread(target=self._run, name="gpusleuth-load-stall", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(CHECK_EVERY_S):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - never ends the load
                pass

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.stall is not None:
            self._append({"kind": "ended", "id": self.stall.id, "t_ns": time.time_ns()})
            self.stall = None

    def _say(self, text: str) -> None:
        if self.say is not None:
            self.say(text)

    def _append(self, obj: dict[str, Any]) -> None:
        if self.run_dir is None:
            return
        layout = RunDir(self.run_dir)
        layout.stalls_dir.mkdir(parents=True, exist_ok=True)
        with open(layout.stalls_log, "a") as f:
            f.write(json.dumps(obj, default=str) + "\n")
