"""One verdict per stall the recorder saw: which rank(s) held the job, where (file:line), where the others
waited, for how long, and the process-hours lost.

The culprit is found the way a person reads the stacks: in a synchronous job every rank that reached the
collective waits inside it, so the rank whose main thread is *not* inside a collective while others are is
the one they wait for; where the stacks do not tell (all in one, or none taken), the rank behind in step count
is. Used by the report (``bundle.analyze`` → the ``hang`` rule) and, live, by the recorder's stall watch for its
terminal line — the same verdict both times. Pure: takes ``run/stalls.StallRecord``, reads no file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from typing import TYPE_CHECKING

import numpy as np

from gpusleuth.analysis.telemetry import gpu_busy_in
from gpusleuth.run.stalls import FlightRing, Frame, ProcessStacks, StallRecord, ThreadStack

if TYPE_CHECKING:
    from gpusleuth.run.model import Run

# torch.distributed's Python entry points that block until every rank arrives (or a peer answers)
COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "_all_gather_base",
    "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "broadcast", "broadcast_object_list",
    "barrier", "monitored_barrier", "all_to_all", "all_to_all_single", "reduce", "gather", "gather_object",
    "scatter", "scatter_object_list", "send", "recv", "send_object_list", "recv_object_list",
    "batch_isend_irecv", "all_reduce_coalesced", "all_gather_coalesced", "wait",
})
# frames that are not the job's own code: where a stack is *from* is its innermost frame outside these
_LIBRARY = ("/site-packages/", "/dist-packages/", "/lib/python3", "<frozen", "/gpusleuth/hook/", "<string>")
# where a server runs one request (the frameworks' dispatch, and the hook's wrappers of it): a thread with one of
# these on its stack and the server's own code inside it is serving a request — not the accept loop, not idle on a
# keep-alive connection (library frames only inside the dispatch)
REQUEST_FRAMES = (
    ("socketserver.py", "finish_request"), ("http/server.py", "handle_one_request"),
    ("wsgiref/handlers.py", "run"), ("werkzeug/serving.py", "run_wsgi"), ("flask/app.py", "wsgi_app"),
    ("starlette/applications.py", "__call__"), ("uvicorn/protocols/http/", "run_asgi"),
    ("/gpusleuth/hook/_gpusleuth_serve.py", "handle_one_request"), ("/gpusleuth/hook/_gpusleuth_serve.py", "run"),
    ("/gpusleuth/hook/_gpusleuth_serve.py", "wsgi_app"), ("/gpusleuth/hook/_gpusleuth_serve.py", "__call__"),
)


@dataclass
class RankAt:
    """Where one process of the job was when the stall was seen."""

    pid: int
    rank: int | None
    steps: int
    stalled: bool
    where: str | None = None  # file:line of its main thread's innermost own frame (or innermost frame)
    function: str | None = None
    collective: str | None = None  # the collective its main thread waits in, None: not in one
    via: str | None = None  # how its stack was taken
    stack_error: str | None = None
    # its main thread waits on its DataLoader: where its workers were (pid, file:line of their own code)
    workers: list[tuple[int, str]] = field(default_factory=list)
    # a server (``gpusleuth load``): where its threads serving a request stood, (file:line, threads), most first;
    # ``where`` is the first of them — a server's main thread only accepts connections
    handlers: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class StallVerdict:
    id: int
    since_ns: int  # the stalled processes' earliest last progress
    seen_ns: int
    end_ns: int | None  # resumed or ended; None: still stuck when last looked (or the record stops there)
    recovered: bool
    ended_stuck: bool  # the job ended (or was ended) while stuck
    duration_s: float  # since → end (or → seen)
    threshold_s: float
    culprits: list[RankAt] = field(default_factory=list)
    waiting: list[RankAt] = field(default_factory=list)
    others: list[RankAt] = field(default_factory=list)  # neither (DataLoader workers' stacks are in ``stacks``)
    # "stacks" (not in a collective while others are), "steps" (behind), "mismatch", "flight" (torch's ring),
    # "handlers" (a server: where its request handlers stood), None: undetermined
    how: str | None = None
    process_hours: float = 0.0  # the stalled processes' time since their own last progress, summed
    stalled_processes: int = 0
    stacks_taken: int = 0  # processes whose stack was captured (all threads)
    stacks_failed: int = 0
    via: list[str] = field(default_factory=list)
    action: str = "dump"
    # the GPUs during the stall (NVML samples): a spin in a collective reads utilization high at low power,
    # a host-side stall utilization ≈ 0; None without GPU samples
    gpu_util_pct: float | None = None
    gpu_power_share: float | None = None  # mean power ÷ power limit
    gpu_signature: str | None = None  # "busy-waiting" / "idle" / None (neither, or unknown)
    # it never recovered, but the job then ended by itself with exit code 0: work after the training loop
    # outside any phase (an export, an upload), not a hang
    ended_normally: bool = False
    # torch's Flight Recorder at the stall, where the job kept one: one sentence ("rank 1 never entered
    # all_reduce #12 …"), and the ranks it finds behind (by pid)
    flight: str | None = None
    flight_behind: list[int] = field(default_factory=list)

    @property
    def sentence(self) -> str:
        """One line: culprit and where, the others and where they wait. Job text inside: untrusted."""
        def who(ps: list[RankAt]) -> str:
            ps = sorted(ps, key=lambda p: (p.rank is None, p.rank or 0, p.pid))
            names = [f"rank {p.rank}" if p.rank is not None else f"pid {p.pid}" for p in ps]
            return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]

        if not self.culprits and self.waiting:
            colls = sorted({p.collective or "" for p in self.waiting})
            wat = sorted({p.where for p in self.waiting if p.where})
            return (f"{who(self.waiting)} wait{'s' if len(self.waiting) == 1 else ''} in {'/'.join(colls)}"
                    + (f" at {', '.join(wat[:3])}" if wat else "") + ", all in the same one: the rank they wait for "
                    "is not among the processes recorded here (another node's run directory?)")
        if not self.culprits:
            where = sorted({p.where for p in self.waiting + self.others if p.where})
            return "no single culprit: " + (f"stopped in {', '.join(where[:3])}" if where else "no stack taken")
        c = self.culprits
        if self.how == "mismatch":
            sites = "; ".join(f"{who([p])} in {p.collective} at {p.where}" for p in
                              sorted(c, key=lambda p: (p.rank is None, p.rank or 0, p.pid)))
            s = f"mismatched collectives: {sites}"
            if self.waiting:
                s += f"; {who(self.waiting)} wait{'s' if len(self.waiting) == 1 else ''} in " \
                     f"{'/'.join(sorted({p.collective or '' for p in self.waiting}))}"
            return s
        if self.how == "handlers":
            return "; ".join(f"{who([p])}: request handler(s) at {handler_text(p.handlers)}" for p in c)
        verb = "is" if len(c) == 1 else "are"
        at = sorted({p.where for p in c if p.where})
        s = f"{who(c)} {verb} " + (f"in {', '.join(at[:3])}" if at else "stopped")
        if self.how == "stacks":
            s += ", outside any collective"
        ws = sorted({w for p in c for _, w in p.workers})
        if ws:
            s += f", waiting for its DataLoader worker(s) at {', '.join(ws[:3])}"
        elif self.how == "steps":
            s += f", behind at step {min(p.steps for p in c)}"
        if self.waiting:
            colls = sorted({p.collective for p in self.waiting if p.collective})
            wat = sorted({p.where for p in self.waiting if p.where})
            s += f"; {who(self.waiting)} wait{'s' if len(self.waiting) == 1 else ''}"
            s += f" in {'/'.join(colls)}" if colls else ""
            s += f" at {', '.join(wat[:3])}" if wat else ""
        return s


def own_frame(frames: list[Frame]) -> Frame | None:
    """The innermost frame of the job's own code (not the standard library, a package, or the hook)."""
    for f in frames:
        if not any(m in f.file for m in _LIBRARY):
            return f
    return frames[0] if frames else None


def _serving(frames: list[Frame]) -> int | None:
    """The index of the outermost request-dispatch frame of a thread (frames innermost first), None: none."""
    for i in range(len(frames) - 1, -1, -1):
        f = frames[i]
        path = f.file.replace("\\", "/")
        if any(f.function == fn and path.endswith(mark) if mark.endswith(".py") else f.function == fn and mark in path
               for mark, fn in REQUEST_FRAMES):
            return i
    return None


def handler_places(ps: ProcessStacks) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """A server's threads by where they stand: (request handlers — threads inside a request's dispatch, at their
    innermost frame of the server's own code —, other threads in its own code), each (file:line, threads), most
    threads first. A thread inside a dispatch with no own frame inside it (waiting for a keep-alive connection's
    next request) is neither."""
    handlers: dict[str, int] = {}
    others: dict[str, int] = {}
    for t in ps.threads:
        if not t.frames:
            continue
        k = _serving(t.frames)
        inner = t.frames[:k] if k is not None else t.frames
        top = next((f for f in inner if not any(m in f.file for m in _LIBRARY)), None)
        where = _loc(top)
        if where is None:
            continue
        into = handlers if k is not None else others
        into[where] = into.get(where, 0) + 1

    def ranked(d: dict[str, int]) -> list[tuple[str, int]]:
        return sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))

    return ranked(handlers), ranked(others)


def handler_text(places: list[tuple[str, int]], most: int = 6) -> str:
    return ", ".join(f"{w} ({n} thread{'s' if n > 1 else ''})" for w, n in places[:most])


def collective_of(frames: list[Frame]) -> str | None:
    """The torch.distributed collective this thread waits in (its innermost one), or None. DDP's gradient
    all-reduce runs inside autograd's C++ backward: a thread in backward under DDP is said to be there."""
    for f in frames:
        if f.function in COLLECTIVES and "torch/distributed" in f.file.replace("\\", "/"):
            return f.function
    for f in frames:
        if f.function in ("_engine_run_backward", "run_backward") and "torch/autograd" in f.file.replace("\\", "/"):
            return "backward (DDP's gradient all-reduce)"
    return None


def _main_thread(ps: ProcessStacks) -> ThreadStack | None:
    for t in ps.threads:
        if t.main:
            return t
    return ps.threads[-1] if ps.threads else None


def _loc(f: Frame | None) -> str | None:
    if f is None:
        return None
    return f"{f.file}:{f.line}" if f.line is not None else f.file


def _workers_of(pid: int, stacks: list[ProcessStacks]) -> list[tuple[int, str]]:
    """Where the DataLoader workers of ``pid`` were: their main thread's own innermost frame."""
    out = []
    for s in stacks:
        if s.ppid != pid or s.role not in (None, "dataloader_worker"):
            continue
        main = _main_thread(s)
        where = _loc(own_frame(main.frames)) if main is not None else None
        if where:
            out.append((s.pid, where))
    return sorted(out)


def _names(ps: list[int], rank_of: dict[int, int | None]) -> str:
    names = [f"rank {rank_of[p]}" if rank_of.get(p) is not None else f"pid {p}"
             for p in sorted(ps, key=lambda p: (rank_of.get(p) is None, rank_of.get(p) or 0, p))]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def flight_reading(rings: list[FlightRing], rank_of: dict[int, int | None]) -> tuple[str | None, list[int]]:
    """What torch's Flight Recorder rings say at a stall, per process group: the last collective each process
    entered (its group's ``last_enqueued_collective``). A process whose last is below the others' never entered
    the collective they are in; equal numbers with different ops are a mismatch. Returns (sentence, pids behind)."""
    rings = [r for r in rings if r.groups]
    if not rings:
        return None, []
    said: list[str] = []
    behind_all: list[int] = []
    for group in sorted({g for r in rings for g in r.groups}, key=lambda g: (g != "0", g)):
        enq: dict[int, int] = {}
        done: dict[int, int] = {}
        for r in rings:
            entered, completed = r.groups.get(group, (None, None))
            if entered is not None:
                enq[r.pid] = entered
            if completed is not None:
                done[r.pid] = completed
        if not enq:
            continue
        top = max(enq.values())
        ahead = [p for p, n in enq.items() if n == top]
        behind = [p for p, n in enq.items() if n < top]

        def op_at(pid: int, seq: int) -> str | None:
            ring = next(r for r in rings if r.pid == pid)
            return next((e.op for e in reversed(ring.entries) if e.group == group and e.seq == seq and not e.p2p), None)

        ops = {p: op_at(p, top) for p in ahead}
        name = "/".join(sorted({o for o in ops.values() if o})) or "collective"
        where = "" if group == "0" else f" (process group {group})"
        if behind:
            lasts = "; ".join(f"{_names([p], rank_of)}'s last: {op_at(p, enq[p]) or 'collective'} #{enq[p]}"
                              for p in sorted(behind, key=lambda p: (rank_of.get(p) is None, rank_of.get(p) or 0)))
            waiting = [p for p in ahead if done.get(p, -1) < top]
            said.append(f"{_names(behind, rank_of)} never entered {name} #{top}{where} ({lasts}); "
                        f"{_names(ahead, rank_of)} entered it" + (" and wait" if waiting else ""))
            behind_all += behind
        elif len({o for o in ops.values() if o}) > 1:
            said.append(f"collective #{top}{where} is " + ", ".join(
                f"{o} on {_names([p for p in ahead if ops[p] == o], rank_of)}" for o in sorted({o for o in ops.values() if o}))
                + ": mismatched")
        elif all(done.get(p, -1) >= top for p in ahead):
            if group == "0":
                said.append(f"every rank recorded here completed its last collective ({name} #{top}): the stall is "
                            "outside collectives")
        else:
            said.append(f"{_names(ahead, rank_of)} entered {name} #{top}{where}, none completed it")
    if not said:
        return None, []
    return "Flight Recorder: " + "; ".join(said), behind_all


def judge(rec: StallRecord, now_ns: int | None = None) -> StallVerdict:
    """The verdict on one stall (``now_ns``: a stall still going, seen live, lasts until now)."""
    stacks = {s.pid: s for s in rec.stacks}
    end = rec.resumed_ns or rec.ended_ns or now_ns
    horizon = end if end is not None else rec.seen_ns
    v = StallVerdict(id=rec.id, since_ns=rec.since_ns, seen_ns=rec.seen_ns, end_ns=end,
                     recovered=rec.resumed_ns is not None, ended_stuck=rec.ended_ns is not None and rec.resumed_ns is None,
                     duration_s=max(horizon - rec.since_ns, 0) / 1e9, threshold_s=rec.threshold_s, action=rec.action)
    ats: list[RankAt] = []
    for p in rec.processes:
        ps = stacks.get(p.pid)
        at = RankAt(pid=p.pid, rank=p.rank, steps=p.steps, stalled=p.stalled)
        if ps is not None:
            at.via, at.stack_error = ps.via, ps.error
            main = _main_thread(ps)
            if p.role == "server":  # its requests run on handler threads: where they stand is where it is stuck
                at.handlers = handler_places(ps)[0]
            if at.handlers:
                at.where = at.handlers[0][0]
            elif main is not None and main.frames:
                top = own_frame(main.frames)
                at.where, at.function = _loc(top), top.function if top else None
                at.collective = collective_of(main.frames)
                if at.collective is None and any("torch/utils/data" in f.file.replace("\\", "/") for f in main.frames):
                    at.workers = _workers_of(p.pid, rec.stacks)
        ats.append(at)
        if p.stalled:
            v.stalled_processes += 1
            v.process_hours += max(horizon - p.last_progress_ns, 0) / 3.6e12
    v.stacks_taken = sum(1 for s in rec.stacks if s.threads)
    v.stacks_failed = sum(1 for s in rec.stacks if not s.threads)
    v.via = sorted({s.via for s in rec.stacks if s.threads})
    in_coll = [a for a in ats if a.collective is not None]
    free = [a for a in ats if a.collective is None and a.where is not None]
    sites = {(a.collective, a.where) for a in in_coll}
    if in_coll and free:
        v.culprits, v.waiting, v.how = free, in_coll, "stacks"
    elif len(in_coll) == len(ats) > 1 and len(sites) > 1:
        # every rank in a collective, not the same one: a mismatched collective; the ranks at the less common
        # call site are named (with two ranks, both sites are: nothing says which one is wrong)
        groups: dict[tuple[str | None, str | None], list[RankAt]] = {}
        for a in in_coll:
            groups.setdefault((a.collective, a.where), []).append(a)
        sizes = sorted(len(g) for g in groups.values())
        if sizes[0] < sizes[-1]:
            v.culprits = [a for g in groups.values() if len(g) < sizes[-1] for a in g]
            v.waiting = [a for a in in_coll if a not in v.culprits]
        else:
            v.culprits = list(in_coll)
        v.how = "mismatch"
    elif len(ats) > 1 and min(a.steps for a in ats) < max(a.steps for a in ats):
        low = min(a.steps for a in ats)
        v.culprits = [a for a in ats if a.steps == low]
        v.waiting = [a for a in ats if a.steps != low]
        v.how = "steps"
    elif ats and all(a.handlers for a in ats):
        v.culprits, v.how = ats, "handlers"  # a server stuck in its request handlers
    elif len(ats) == 1 and ats[0].where is not None and ats[0].collective is None:
        v.culprits, v.how = ats, "stacks"
    elif in_coll and len(sites) == 1 and len(in_coll) == len(ats):
        v.waiting = in_coll  # all wait in the same collective: for a rank this recording does not hold
    v.flight, v.flight_behind = flight_reading(rec.flight, {p.pid: p.rank for p in rec.processes})
    if v.flight_behind and v.how in (None, "steps"):
        # the stacks did not separate the ranks: the ring says who never entered the collective the others are in
        v.culprits = [a for a in ats if a.pid in v.flight_behind]
        v.waiting = [a for a in ats if a.pid not in v.flight_behind]
        v.how = "flight"
    v.others = [a for a in ats if a not in v.culprits and a not in v.waiting]
    return v


SPIN_UTIL_PCT = 80.0  # NVML utilization this high …
SPIN_POWER_SHARE = 0.4  # … at under this share of the power limit: kernels resident, doing nothing (a spin)
IDLE_UTIL_PCT = 5.0


def judge_all(records: list[StallRecord]) -> list[StallVerdict]:
    return [judge(r) for r in records]


def judge_run(run: Run) -> list[StallVerdict]:
    """Every stall of a recorded run, with the GPUs' signature over its span where GPUs were sampled."""
    verdicts = judge_all(list(run.stalls))
    for v in verdicts:
        v.ended_normally = v.ended_stuck and run.meta.get("exit_code") == 0 and not run.meta.get("stopped_by")
    gpu = run.gpu
    if not verdicts or not len(gpu) or "t_ns" not in gpu:
        return verdicts
    limits = {int(h["index"]): h.get("power_limit_w") for h in (run.meta.get("recorder") or {}).get("gpu") or []
              if isinstance(h, dict) and h.get("index") is not None}
    t = np.asarray(gpu["t_ns"], dtype=np.int64)
    for v in verdicts:
        end = v.end_ns if v.end_ns is not None else int(t.max())
        m = (t >= v.since_ns) & (t <= end)
        if not m.any():
            continue
        busy = gpu_busy_in(gpu, v.since_ns, end)
        v.gpu_util_pct = 100.0 * busy if busy is not None else None
        if "power_w" in gpu and "gpu" in gpu:
            power = np.asarray(gpu["power_w"], dtype=float)[m]
            limit = np.asarray([limits.get(int(i)) or np.nan for i in np.asarray(gpu["gpu"])[m]], dtype=float)
            share = power / limit
            share = share[np.isfinite(share)]
            v.gpu_power_share = float(share.mean()) if len(share) else None
        if v.gpu_util_pct is not None and v.gpu_util_pct >= SPIN_UTIL_PCT and v.gpu_power_share is not None \
                and v.gpu_power_share < SPIN_POWER_SHARE:
            v.gpu_signature = "busy-waiting"
        elif v.gpu_util_pct is not None and v.gpu_util_pct < IDLE_UTIL_PCT:
            v.gpu_signature = "idle"
    return verdicts
