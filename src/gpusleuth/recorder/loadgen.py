"""Drive an HTTP server through load levels and record every request: the engine of ``gpusleuth load``.

Two ways to load a server, because they answer different questions:

* **closed loop** (``--concurrency``): N workers, each sending its next request when the previous one is
  answered — what N users clicking "send" again see; throughput is whatever the server gives back.
* **open loop** (``--rate``): requests *start* on a fixed schedule whatever the answers — traffic that does
  not slow down because the server did. A request that would go over ``max_inflight`` outstanding ones is
  recorded as ``dropped``; when this process itself falls behind the schedule the lag is recorded per
  request (``lag_ns``) and latencies are measured from the *scheduled* start, so a late generator never
  hides queueing (no coordinated omission).

Each level ends at ``duration_s`` or after ``requests`` requests, whichever comes first; requests in flight
then finish (bounded by ``timeout_s``). Every request is one row (``Run.load``: level, concurrency, rate,
start_ns, end_ns, status, error, lag_ns) on the wall clock, so it lines up with the recorder's samples.
The numbers (percentiles, the knee) are computed later by ``analysis/load.py``, never here.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from gpusleuth.run.layout import LOAD_TABLE, RunDir
from gpusleuth.recorder.http_client import Connection, ProtocolError, Target, parse_target, safe_url, why_failed

MODES = ("closed", "open")
ERRORS = ("", "timeout", "connect", "http", "dropped")


@dataclass
class LoadPlan:
    url: str
    mode: str  # "closed" (levels are concurrencies) or "open" (levels are rates, requests/s)
    levels: list[float]
    duration_s: float = 10.0
    requests: int | None = None  # per level, at most
    timeout_s: float = 10.0
    method: str = "GET"
    headers: list[tuple[str, str]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=lambda: [b""])
    max_inflight: int = 1024  # open loop: outstanding requests before new ones are dropped
    pause_s: float = 0.2  # between levels, so one level's queue does not spill into the next
    p95_budget_ms: float | None = None
    insecure: bool = False  # https: do not check the certificate

    def target(self) -> Target:
        return parse_target(self.url, self.method, self.headers, verify=not self.insecure)

    def to_meta(self) -> dict:
        """What ``meta["load"]`` keeps: the parameters, with the URL's credentials and query stripped."""
        return {"url": safe_url(self.url), "mode": self.mode, "method": self.method, "levels": self.levels,
                "duration_s": self.duration_s, "requests_per_level": self.requests, "timeout_s": self.timeout_s,
                "p95_budget_ms": self.p95_budget_ms, "bodies": len(self.bodies),
                "max_inflight": self.max_inflight if self.mode == "open" else None, "insecure": self.insecure}


class _Rows:
    """The columns of ``Run.load``, appended per request (plain lists, numpy at the end)."""

    def __init__(self):
        self.cols: dict[str, list] = {k: [] for k in
                                      ("level", "concurrency", "rate", "start_ns", "end_ns", "status", "error", "lag_ns")}

    def add(self, level: int, conc: int, rate: float, start: int, end: int, status: int, error: str, lag: int = 0):
        c = self.cols
        c["level"].append(level)
        c["concurrency"].append(conc)
        c["rate"].append(rate)
        c["start_ns"].append(start)
        c["end_ns"].append(end)
        c["status"].append(status)
        c["error"].append(error)
        c["lag_ns"].append(lag)

    def count(self, level: int) -> int:
        return sum(1 for x in self.cols["level"] if x == level)

    def arrays(self) -> dict[str, np.ndarray]:
        c = self.cols
        out = {k: np.asarray(c[k], dtype=np.int64) for k in ("level", "concurrency", "start_ns", "end_ns",
                                                               "status", "lag_ns")}
        out["rate"] = np.asarray(c["rate"], dtype=np.float64)
        out["error"] = np.asarray(c["error"], dtype=object)
        return {k: out[k] for k in c}


class _WaitFor:
    """``asyncio.timeout`` for Python 3.10, by cancelling the task at the deadline."""

    def __init__(self, seconds: float):
        self.seconds, self.handle, self.fired = seconds, None, False

    async def __aenter__(self):
        task = asyncio.current_task()
        self.handle = asyncio.get_running_loop().call_later(self.seconds, self._fire, task)

    def _fire(self, task) -> None:
        self.fired = True
        task.cancel()

    async def __aexit__(self, kind, exc, tb):
        self.handle.cancel()
        if self.fired and kind is asyncio.CancelledError:
            raise asyncio.TimeoutError from None
        return False


# 3.11+: asyncio.timeout, no extra task per request (wait_for makes one)
_deadline = getattr(asyncio, "timeout", None) or _WaitFor


async def _send(conn: Connection, request: bytes, timeout_s: float) -> tuple[int, str]:
    """One request: (status, error code). The connection is closed after anything but a clean answer."""
    try:
        async with _deadline(timeout_s):
            status = await conn.send(request)
    except (asyncio.TimeoutError, TimeoutError):
        conn.close()
        return 0, "timeout"
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ProtocolError, ValueError):
        conn.close()
        return 0, "connect"
    return status, "" if 200 <= status < 300 else "http"


class Generator:
    """Runs a :class:`LoadPlan`'s levels in one asyncio loop. ``cancel`` (a threading.Event) stops it early
    (the server died, Ctrl-C): the rows so far are kept."""

    def __init__(self, plan: LoadPlan, cancel: threading.Event | None = None,
                 progress: Callable[[str], None] | None = None):
        self.plan = plan
        self.target = plan.target()
        self.requests = [self.target.request(b) for b in plan.bodies] or [self.target.request(b"")]
        self.cancel = cancel or threading.Event()
        self.progress = progress
        self.rows = _Rows()
        self.notes: list[str] = []
        # per level, this process's CPU over the level's wall time, in cores: on the server's machine the
        # generator's CPU is not the server's, so the report says how much it took
        self.cpu_cores: list[float] = []

    async def run(self) -> None:
        p = self.plan
        for i, value in enumerate(p.levels):
            if self.cancel.is_set():
                break
            if i and p.pause_s:
                await asyncio.sleep(p.pause_s)
            t0, cpu0 = time.monotonic(), time.process_time()
            if p.mode == "closed":
                await self._closed(i, int(value))
            else:
                await self._open(i, float(value))
            self.cpu_cores.append(round((time.process_time() - cpu0) / max(time.monotonic() - t0, 1e-6), 3))
            if self.cancel.is_set():  # Ctrl-C, or the server ended: this level was cut short
                self.notes.append(f"stopped early: level {i + 1} of {len(p.levels)} was cut short"
                                  + (f" and {len(p.levels) - i - 1} more did not run" if i + 1 < len(p.levels) else ""))
            if self.progress is not None:
                what = f"concurrency {int(value)}" if p.mode == "closed" else f"rate {value:g}/s"
                self.progress(f"level {i + 1}/{len(p.levels)} ({what}): {self.rows.count(i):,} requests "
                              f"in {time.monotonic() - t0:.1f} s")

    async def _until_done(self, aws) -> None:
        """Wait for the workers (or requests in flight); on ``cancel`` abandon them at once — Ctrl-C must not
        wait out a hung server's --timeout. An abandoned request has no answer, so it is not a row."""
        tasks = [asyncio.ensure_future(a) for a in aws]
        pending = set(tasks)
        while pending:
            _, pending = await asyncio.wait(pending, timeout=0.05)
            if pending and self.cancel.is_set():
                for t in pending:
                    t.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                break
        for t in tasks:  # a bug in a worker is not swallowed
            if not t.cancelled() and t.exception() is not None:
                raise t.exception()

    def _budget(self):
        cap = self.plan.requests
        return itertools.count() if cap is None else iter(range(cap))

    async def _closed(self, level: int, conc: int) -> None:
        p, rows, cancel = self.plan, self.rows, self.cancel
        deadline = time.monotonic() + p.duration_s
        tickets = self._budget()
        bodies = itertools.cycle(self.requests)

        async def worker() -> None:
            conn = Connection(self.target)
            try:
                while time.monotonic() < deadline and not cancel.is_set() and next(tickets, None) is not None:
                    start = time.time_ns()
                    status, error = await _send(conn, next(bodies), p.timeout_s)
                    rows.add(level, conc, 0.0, start, time.time_ns(), status, error)
                    if error == "connect":
                        await asyncio.sleep(0.01)  # a refusing server: do not spin a core on it
            finally:
                conn.close()

        await self._until_done(worker() for _ in range(conc))

    async def _open(self, level: int, rate: float) -> None:
        p, rows, cancel = self.plan, self.rows, self.cancel
        n = math.ceil(p.duration_s * rate)
        if p.requests is not None:
            n = min(n, p.requests)
        idle: list[Connection] = []
        inflight: set[asyncio.Task] = set()
        bodies = itertools.cycle(self.requests)
        mono0, wall0 = time.monotonic_ns(), time.time_ns()
        step_ns = 1e9 / rate

        async def one(due_wall: int, request: bytes) -> None:
            conn = idle.pop() if idle else Connection(self.target)
            lag = max(time.time_ns() - due_wall, 0)
            status, error = await _send(conn, request, p.timeout_s)
            rows.add(level, 0, rate, due_wall, time.time_ns(), status, error, lag)
            if conn.writer is not None:
                idle.append(conn)
            else:
                conn.close()

        for i in range(n):
            due = mono0 + int(i * step_ns)
            delay = (due - time.monotonic_ns()) / 1e9
            await asyncio.sleep(max(delay, 0.0))
            if cancel.is_set():
                break
            due_wall = wall0 + int(i * step_ns)
            if len(inflight) >= p.max_inflight:
                rows.add(level, 0, rate, due_wall, due_wall, 0, "dropped")
                continue
            task = asyncio.ensure_future(one(due_wall, next(bodies)))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        if inflight:
            await self._until_done(inflight)
        for conn in idle:
            conn.close()


async def wait_ready(target: Target, timeout_s: float, cancel: threading.Event | None = None) -> str | None:
    """Poll the URL until it answers anything HTTP (a 404 or 405 is an answer: the server is up). None when
    it did, else a sentence saying why not."""
    probe = parse_target(target.url, "GET", verify=target.verify)
    request = probe.request(b"")
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        if cancel is not None and cancel.is_set():
            return "the server exited before it answered"
        conn = Connection(probe)
        try:
            async with _deadline(min(5.0, max(deadline - time.monotonic(), 0.1))):
                await conn.send(request)
            return None
        except (asyncio.TimeoutError, TimeoutError):
            last = "no answer within 5 s"
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ProtocolError, ValueError) as exc:
            last = why_failed(exc)
            if isinstance(exc, ssl.SSLError):  # a certificate does not become trusted by waiting
                return f"{safe_url(target.url)} cannot be loaded: {last}"
        finally:
            conn.close()
        await asyncio.sleep(0.1)
    return f"{safe_url(target.url)} did not answer within {timeout_s:g} s ({last})"


@dataclass
class LoadResult:
    columns: dict[str, np.ndarray]
    start_ns: int
    end_ns: int
    notes: list[str]
    not_ready: str | None = None  # why no level ran: the server never answered
    cpu_cores: list[float] = field(default_factory=list)  # the generator's own CPU per level, in cores

    def meta(self, plan: LoadPlan) -> dict:
        """``meta["load"]``: the plan's parameters and what the generator itself cost."""
        return {**plan.to_meta(), "generator_cpu_cores": self.cpu_cores, "notes": self.notes}


def run_plan(plan: LoadPlan, cancel: threading.Event | None = None, ready_timeout_s: float | None = None,
             progress: Callable[[str], None] | None = None) -> LoadResult:
    """Run the plan to the end (blocking): optionally wait for the URL to answer first."""
    gen = Generator(plan, cancel, progress)
    start = time.time_ns()
    not_ready = None

    async def main():
        nonlocal not_ready
        if ready_timeout_s is not None:
            not_ready = await wait_ready(gen.target, ready_timeout_s, gen.cancel)
            if not_ready:
                return
        await gen.run()

    asyncio.run(main())
    return LoadResult(gen.rows.arrays(), start, time.time_ns(), gen.notes, not_ready, gen.cpu_cores)


class LoadThread:
    """The plan run in a thread beside the launcher's supervision of the server (``load -- CMD``).

    Started from the launcher's wait loop (``tick``), i.e. after it blocked the forwarded signals, so the
    thread inherits that mask and Ctrl-C still reaches the launcher's ``sigtimedwait``. ``done`` tells the
    launcher to stop the server (its own SIGINT → SIGTERM → SIGKILL)."""

    def __init__(self, plan: LoadPlan, ready_timeout_s: float, progress: Callable[[str], None] | None = None):
        self.plan, self.ready_timeout_s, self.progress = plan, ready_timeout_s, progress
        self.cancel = threading.Event()
        self.result: LoadResult | None = None
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name="gpusleuth-load", daemon=True)
            self._thread.start()

    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def _main(self) -> None:
        try:
            self.result = run_plan(self.plan, self.cancel, self.ready_timeout_s, self.progress)
        except BaseException as exc:  # noqa: BLE001 - reported by finish(), the server is still stopped
            self.error = exc

    def finish(self, server_gone: str | None = None) -> LoadResult | None:
        """After the server ended: stop whatever is still sending and return the rows."""
        self.cancel.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise self.error
        return self.result


def write_load(run_dir: Path, result: LoadResult) -> None:
    """``load.parquet`` (atomically, zstd) in the run directory."""
    from gpusleuth.recorder.finalize import write_table
    from gpusleuth.run.model import Table

    write_table(RunDir(run_dir).table(LOAD_TABLE), Table(result.columns))
