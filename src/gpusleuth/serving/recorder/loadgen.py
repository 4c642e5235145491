"""The load generator behind ``gpusleuth load``: closed loop (N workers) or open loop (a rate), level by
level, against one URL — plain HTTP, or an OpenAI-compatible LLM endpoint with every token's arrival timed.

Why one asyncio loop and not threads: a load generator must not be the bottleneck, and a thread per worker
costs a context switch per request on a small machine (measured: BENCHMARKS.md, "load generator"). One loop
on one core keeps thousands of requests in flight, and every timestamp is taken where it happened (a
request's start before its write, a token event when its bytes came off the socket, its end when its body
ended). Open-loop arrivals are constant, Poisson or gamma (``--arrivals``; gamma's ``cv`` is the spread of
the gaps: 1 is Poisson, more is burstier), drawn from a seeded generator so a run can be repeated: the schedule
is ``serving/recorder/arrivals.py``; the probe that waits for the server to answer (and asks an LLM server for its
model) before the first level is ``serving/recorder/server_probe.py``; the plan and each request's body are
``serving/recorder/load_plan.py``; the warm-up's summary is ``serving/recorder/warmup.py``.

Every request is one row (``Run.load``: docs/run-format.md) on the wall clock, so it lines up with the
recorder's samples and the server's own request records (the ``X-Request-Id`` header carries ``request_id``).
The numbers (percentiles, goodput, the knee) are computed later by ``serving/analysis/load.py``, never here.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable, Iterable, Iterator

import numpy as np

from gpusleuth.run.layout import LOAD_TABLE, RunDir
from gpusleuth.serving.recorder.arrivals import arrival_offsets
from gpusleuth.serving.recorder.http_client import Connection, ProtocolError, why_failed
from gpusleuth.serving.recorder.load_plan import LoadPlan, RequestBodies
from gpusleuth.serving.recorder.openai_api import OpenAIAnswer
from gpusleuth.serving.recorder.request_watch import request_watch
from gpusleuth.serving.recorder.server_probe import discover_model, wait_ready
from gpusleuth.serving.recorder.time_limit import time_limit
from gpusleuth.serving.recorder.warmup import WarmupSummary, warmup_note, warmup_summary

# error codes of a row: "" answered 2xx (and, for an LLM endpoint, a usable answer); "http" non-2xx;
# "connect" refused/reset/closed without an answer; "protocol" not HTTP/1.x (a bad status line or framing);
# "timeout" no complete answer within timeout_s; "dropped" open loop, not sent (max_inflight outstanding);
# "api" a 2xx that is not an OpenAI answer; "stream" a malformed or error event, or a stream cut short;
# "cancelled" sent, then abandoned unanswered when the load was stopped (Ctrl-C, the server died)
ERRORS = ("", "timeout", "connect", "http", "dropped", "protocol", "api", "stream", "cancelled")


COLUMNS = ("level", "concurrency", "rate", "start_ns", "end_ns", "status", "error", "lag_ns", "request_id",
           "first_token_ns", "input_tokens", "output_tokens", "tokens_from", "token_ns", "detail", "prompt",
           "engine_prefill_ns", "engine_decode_ns", "cached_tokens")
_INT = ("level", "concurrency", "start_ns", "end_ns", "status", "lag_ns", "request_id", "first_token_ns",
        "input_tokens", "output_tokens", "prompt", "engine_prefill_ns", "engine_decode_ns", "cached_tokens")


class _LoadRows:
    """The columns of ``Run.load``, appended per request (plain lists, numpy at the end)."""

    def __init__(self) -> None:
        # a column's cells: ints, floats, strings, or (token_ns) each request's token event times
        self.cols: dict[str, list[object]] = {k: [] for k in COLUMNS}

    def add(self, level: int, conc: int, rate: float, start: int, end: int, status: int, error: str,
            lag: int = 0, rid: int = -1, answer: OpenAIAnswer | None = None, detail: str = "",
            prompt: int = -1) -> None:
        c = self.cols
        c["level"].append(level)
        c["concurrency"].append(conc)
        c["rate"].append(rate)
        c["start_ns"].append(start)
        c["end_ns"].append(end)
        c["status"].append(status)
        c["error"].append(error)
        c["lag_ns"].append(lag)
        c["request_id"].append(rid)
        c["detail"].append(detail)
        c["prompt"].append(prompt)
        if answer is None:
            c["first_token_ns"].append(-1)
            c["input_tokens"].append(-1)
            c["output_tokens"].append(-1)
            c["tokens_from"].append("")
            c["token_ns"].append(())
            for k in ("engine_prefill_ns", "engine_decode_ns", "cached_tokens"):
                c[k].append(-1)
        else:
            c["first_token_ns"].append(answer.token_ns[0] if answer.token_ns else -1)
            c["input_tokens"].append(answer.input_tokens)
            c["output_tokens"].append(answer.output_tokens)
            c["tokens_from"].append(answer.tokens_from)
            c["token_ns"].append(answer.token_ns)
            c["engine_prefill_ns"].append(answer.engine_prefill_ns)
            c["engine_decode_ns"].append(answer.engine_decode_ns)
            c["cached_tokens"].append(answer.cached_tokens)

    def count(self, level: int) -> int:
        return sum(1 for x in self.cols["level"] if x == level)

    def arrays(self) -> dict[str, np.ndarray]:
        c = self.cols
        out = {k: np.asarray(c[k], dtype=np.int64) for k in _INT}
        out["rate"] = np.asarray(c["rate"], dtype=np.float64)
        for k in ("error", "tokens_from", "detail"):
            out[k] = np.asarray(c[k], dtype=object)
        tokens = np.empty(len(c["token_ns"]), dtype=object)
        for i, t in enumerate(c["token_ns"]):
            tokens[i] = np.asarray(t, dtype=np.int64)
        out["token_ns"] = tokens
        return {k: out[k] for k in COLUMNS}


async def _send(conn: Connection, request: bytes, timeout_s: float,
                answer: OpenAIAnswer | None = None) -> tuple[int, str, str]:
    """One request: (status, error code, detail). The connection is closed after anything but a clean
    answer. With ``answer`` the body is parsed as an OpenAI answer as it arrives."""
    try:
        async with time_limit(timeout_s):
            status = await conn.send(request, answer)
    except (asyncio.TimeoutError, TimeoutError):
        conn.close()
        got = (f"; {len(answer.token_ns)} token event(s) had come, the stream had not ended"
               if answer is not None and answer.token_ns else "")
        return (answer.status if answer is not None else 0), "timeout", f"no complete answer within {timeout_s:g} s{got}"
    except ProtocolError as exc:
        conn.close()
        return 0, "protocol", f"not an HTTP answer: {exc}"
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
        conn.close()
        if answer is not None and answer.token_ns:
            return answer.status, "stream", f"the stream was cut after {len(answer.token_ns)} token event(s) ({why_failed(exc)})"
        return 0, "connect", why_failed(exc)
    if not 200 <= status < 300:
        return status, "http", ""
    if answer is not None:
        answer.finish()
        if answer.problem:
            return status, answer.problem, answer.detail
    return status, "", ""


class Generator:
    """Runs a :class:`LoadPlan`'s levels in one asyncio loop. ``cancel`` (a threading.Event) stops it early
    (the server died, Ctrl-C): the rows so far are kept, and requests in flight become ``cancelled`` rows."""

    def __init__(self, plan: LoadPlan, cancel: threading.Event | None = None,
                 progress: Callable[[str], None] | None = None):
        self.plan = plan
        self.target = plan.target()
        self.bodies = RequestBodies(plan)  # across levels: a level never resends an earlier level's prompts
        # X-Request-Id on every request, unless the user set one: the server's own records can join ours
        self.tag_ids = not any(k.lower() == "x-request-id" for k, _ in plan.headers)
        # engines take X-Request-Id as their own request id (vLLM, transformers serve), so ids must not repeat
        # across runs against one server: a random 40-bit base, a plain integer still (the hook reads it as one)
        self.ids = itertools.count(secrets.randbits(40) << 20)
        self.cancel = cancel or threading.Event()
        self.progress = progress
        self.rows = _LoadRows()
        self.notes: list[str] = list(plan.notes)
        self.rng = np.random.default_rng(plan.seed)
        # per level, this process's CPU over the level's wall time, in cores: on the server's machine the
        # generator's CPU is not the server's, so the report says how much it took
        self.cpu_cores: list[float] = []
        self.warmup: WarmupSummary | None = None  # what the warm-up requests got (meta["load"]["warmup"])
        self.watch = request_watch(progress, plan.stall_after)  # requests outstanding with nothing coming back (issue 33)

    def _next(self, bodies: RequestBodies) -> tuple[bytes, int, int]:
        """(request bytes, request id, prompt index) of the next request."""
        body, prompt = next(bodies)
        # the row's id is the one sent: none of ours when the user's --header set X-Request-Id
        rid = next(self.ids) if self.tag_ids else -1
        extra = b"X-Request-Id: %d\r\n" % rid if self.tag_ids else b""
        return self.target.request(body, extra), rid, prompt

    async def _one(self, conn: Connection, level: int, conc: int, rate: float, start: int, lag: int,
                   request: bytes, rid: int, prompt: int, rows: _LoadRows | None = None) -> str:
        """Send one request and add its row (its error code is returned); a request abandoned by ``cancel``
        is a ``cancelled`` row. ``rows``: where the row goes (the levels' own by default)."""
        rows = rows if rows is not None else self.rows
        answer = OpenAIAnswer(stream=self.plan.stream) if self.plan.api != "http" else None
        key = self.watch.begin(time.time_ns(), answer) if self.watch is not None else 0
        try:
            status, error, detail = await _send(conn, request, self.plan.timeout_s, answer)
        except asyncio.CancelledError:
            if self.watch is not None:
                self.watch.end(key, answered=False)
            conn.close()
            rows.add(level, conc, rate, start, time.time_ns(), 0, "cancelled", lag, rid, answer,
                     "sent, then abandoned unanswered when the load was stopped", prompt)
            raise
        if self.watch is not None:
            self.watch.end(key, answered=status > 0)
        rows.add(level, conc, rate, start, time.time_ns(), status, error, lag, rid, answer, detail, prompt)
        return error

    async def warm_up(self) -> None:
        """``plan.warmup`` requests sent together (the run's next prompts: fresh ones), each bounded by the
        timeout, before the first level; their rows are kept apart (``self.warmup``) and said in one sentence."""
        n = self.plan.warmup
        if n <= 0 or self.cancel.is_set():
            return
        rows = _LoadRows()

        async def one() -> None:
            conn = Connection(self.target)
            try:
                request, rid, prompt = self._next(self.bodies)
                await self._one(conn, -1, n, 0.0, time.time_ns(), 0, request, rid, prompt, rows)
            finally:
                conn.close()

        t0 = time.time_ns()
        await self._until_done(one() for _ in range(n))
        # its window on the wall clock: the recorded server's requests in it are the warm-up's (serving/analysis/requests.py)
        self.warmup = {**warmup_summary(rows.arrays()), "start_ns": t0, "end_ns": time.time_ns()}
        note = warmup_note(self.warmup)
        self.notes.append(note)
        if self.progress is not None:
            self.progress(note)

    async def run(self) -> None:
        if self.watch is not None:
            self.watch.start()
        try:
            await self._levels()
        finally:
            if self.watch is not None:
                self.watch.close()

    async def _levels(self) -> None:
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
        source = self.bodies.source
        note = source.repeat_note() if source is not None else None
        if note:
            self.notes.append(note)
            if self.progress is not None:
                self.progress(note)

    async def _until_done(self, aws: Iterable[Awaitable[None]]) -> None:
        """Wait for the workers (or requests in flight); on ``cancel`` abandon them at once — Ctrl-C must not
        wait out a hung server's --timeout. An abandoned request becomes a ``cancelled`` row (it was sent,
        it has no answer: no latency is invented for it)."""
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
            failure = None if t.cancelled() else t.exception()
            if failure is not None:
                raise failure

    def _budget(self) -> Iterator[int]:
        cap = self.plan.requests
        return itertools.count() if cap is None else iter(range(cap))

    async def _closed(self, level: int, conc: int) -> None:
        p, cancel = self.plan, self.cancel
        deadline = time.monotonic() + p.duration_s
        tickets = self._budget()
        bodies = self.bodies

        async def worker() -> None:
            conn = Connection(self.target)
            try:
                while time.monotonic() < deadline and not cancel.is_set() and next(tickets, None) is not None:
                    request, rid, prompt = self._next(bodies)
                    error = await self._one(conn, level, conc, 0.0, time.time_ns(), 0, request, rid, prompt)
                    if error in ("connect", "protocol"):
                        await asyncio.sleep(0.01)  # a refusing server: do not spin a core on it
            finally:
                conn.close()

        await self._until_done(worker() for _ in range(conc))

    async def _open(self, level: int, rate: float) -> None:
        p, rows, cancel = self.plan, self.rows, self.cancel
        offsets = arrival_offsets(rate, p.duration_s, p.arrivals, p.cv, self.rng, p.requests)
        idle: list[Connection] = []
        inflight: set[asyncio.Task[None]] = set()
        bodies = self.bodies
        mono0, wall0 = time.monotonic_ns(), time.time_ns()

        async def one(due_wall: int, request: bytes, rid: int, prompt: int) -> None:
            conn = idle.pop() if idle else Connection(self.target)
            lag = max(time.time_ns() - due_wall, 0)
            try:
                await self._one(conn, level, 0, rate, due_wall, lag, request, rid, prompt)
            finally:
                if conn.writer is not None:
                    idle.append(conn)
                else:
                    conn.close()

        for off in offsets:
            off_ns = int(off * 1e9)
            delay = (mono0 + off_ns - time.monotonic_ns()) / 1e9
            await asyncio.sleep(max(delay, 0.0))
            if cancel.is_set():
                break
            due_wall = wall0 + off_ns
            request, rid, prompt = self._next(bodies)
            if len(inflight) >= p.max_inflight:
                rows.add(level, 0, rate, due_wall, due_wall, 0, "dropped", rid=rid, prompt=prompt)
                continue
            task = asyncio.ensure_future(one(due_wall, request, rid, prompt))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        if inflight:
            await self._until_done(inflight)
        for conn in idle:
            conn.close()


@dataclass
class LoadResult:
    columns: dict[str, np.ndarray]
    start_ns: int
    end_ns: int
    notes: list[str]
    not_ready: str | None = None  # why no level ran: the server never answered
    cpu_cores: list[float] = field(default_factory=list)  # the generator's own CPU per level, in cores
    warmup: WarmupSummary | None = None  # the warm-up requests, apart from the levels (warmup_summary)

    def meta(self, plan: LoadPlan) -> dict[str, object]:
        """``meta["load"]``: the plan's parameters and what the generator itself cost."""
        return {**plan.to_meta(), "generator_cpu_cores": self.cpu_cores, "notes": self.notes, "warmup": self.warmup}


def run_plan(plan: LoadPlan, cancel: threading.Event | None = None, ready_timeout_s: float | None = None,
             progress: Callable[[str], None] | None = None,
             on_ready: Callable[[], None] | None = None) -> LoadResult:
    """Run the plan to the end (blocking): optionally wait for the URL to answer first. ``on_ready`` is
    called once the URL answered, right before the first level (the engine's baseline scrape)."""
    gen = Generator(plan, cancel, progress)
    start = time.time_ns()
    not_ready = None

    async def main() -> None:
        nonlocal not_ready
        if ready_timeout_s is not None:
            not_ready, waited = await wait_ready(gen.target, ready_timeout_s, gen.cancel)
            if not_ready:
                return
            if waited:
                gen.notes.append(waited)
                if progress is not None:
                    progress(waited)
        if plan.api != "http" and not plan.model:
            plan.model, said = await discover_model(gen.target)  # kept in meta["load"]["model"]
            if progress is not None:
                progress(said)
        await gen.warm_up()  # before the engine's baseline scrape: the levels' counters hold no warm-up request
        if on_ready is not None:
            on_ready()
        await gen.run()

    asyncio.run(main())
    return LoadResult(gen.rows.arrays(), start, time.time_ns(), gen.notes, not_ready, gen.cpu_cores, gen.warmup)


class LoadThread:
    """The plan run in a thread beside the launcher's supervision of the server (``load -- CMD``).

    Started from the launcher's wait loop (``tick``), i.e. after it blocked the forwarded signals, so the
    thread inherits that mask and Ctrl-C still reaches the launcher's ``sigtimedwait``. ``done`` tells the
    launcher to stop the server (its own SIGINT → SIGTERM → SIGKILL)."""

    def __init__(self, plan: LoadPlan, ready_timeout_s: float, progress: Callable[[str], None] | None = None,
                 on_ready: Callable[[], None] | None = None):
        self.plan, self.ready_timeout_s, self.progress, self.on_ready = plan, ready_timeout_s, progress, on_ready
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
            self.result = run_plan(self.plan, self.cancel, self.ready_timeout_s, self.progress, self.on_ready)
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
