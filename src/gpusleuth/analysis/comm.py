"""Communication and stragglers of a distributed job, from the hook's collective records (no trace).

A pure function of a Run's ``comm``, ``steps``, ``processes`` and ``procs`` tables.

Why the arithmetic is cross-rank: in synchronous data parallelism every rank's step lasts as long as the
slowest rank's, because each collective completes only when its last rank arrives. Per-rank step times
are therefore equal by construction and say nothing about who is slow. What differs is *arrival*: the
fast ranks arrive early and wait, the straggler arrives last and barely waits. So for each collective
(matched across ranks by its group and its sequence number in that group — torch requires every rank to
call a group's collectives in the same order):

* ``wait`` of a rank = last arrival − its own arrival (time lost to the slowest peer);
* ``transfer`` = the rest of its time in the collective (the data moving, once everybody is there);
* the rank that arrived last *caused* the others' wait; what the job loses to the slowest rank is the
  others' wait for it beyond its own wait for them (every rank arrives late now and then on a busy host).

Wait intervals overlap (DDP launches several buckets before the first one completes), so a rank's wait
and communication time are unions of intervals, never sums. Times are host wall clock (``time_ns``): the
ranks of one node share it; across nodes the loader aligns run directories (see analysis/job.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from gpusleuth.analysis import intervals as iv
from gpusleuth.analysis.trace import TraceAnalysis
from gpusleuth.run.model import Run, Table
from gpusleuth.run.stalls import StallRecord


@dataclass
class RankComm:
    """One rank's communication, per step (medians over its steady steps, first step left out)."""

    rank: int
    pid: int
    host: str | None
    local_rank: int | None
    steps: int
    collectives: int
    bytes: int
    step_s: float  # median step
    comm_s: float  # time inside collectives (union)
    wait_s: float  # of which waiting for the last rank to arrive
    transfer_s: float  # the rest: data moving
    data_wait_s: float  # waiting for its input pipeline
    data_cpu_s: float  # of which its main thread was on a CPU (thread CPU clock): host work, not waiting
    other_s: float  # the rest of its step: compute, host work, anything outside data and collectives
    total_comm_s: float  # sums over all its steady steps
    total_wait_s: float
    last_share: float | None  # share of matched collectives where this rank arrived last (None: a trace,
    # which has no arrival times)
    caused_wait_s: float  # seconds the *other* ranks waited for this one (in their steady steps)
    cpu_pct: float | None = None  # mean CPU of its process (recorder samples), % of one core
    # steady steps inside which it spent time in a timed collective: a job whose collectives go through a
    # path the hook does not wrap shows steps without any, and then its ranks cannot be compared
    comm_steps: int = 0

    @property
    def comm_share(self) -> float:
        return self.comm_s / self.step_s if self.step_s > 0 else 0.0

    @property
    def wait_share(self) -> float:
        return self.wait_s / self.step_s if self.step_s > 0 else 0.0


@dataclass
class CommSummary:
    """The job's communication as the ranks measured it, and who they waited for."""

    world_size: int
    ranks: list[RankComm]
    matched: int  # collectives seen on every rank that called them (≥ 2 ranks)
    unmatched: int  # calls seen on one rank only (its peer not recorded, or a cut-off run)
    slow_rank: int | None  # the rank the others waited for most
    slow_caused_share: float  # its share of all waiting
    lost_s: float  # seconds the other ranks lost waiting for it in their steady steps, beyond what it
    # waited for them (the jitter every rank causes), sum over ranks
    lost_per_step_s: float  # per step, mean over the other ranks
    # the slow rank's per-step median minus the median of the others, per part of its step
    slow_extra: dict[str, float] = field(default_factory=dict)
    lost_gross_s: float = 0.0  # all the others' waiting for it (before taking out what it waited for them)
    # how much longer its step is than the others' outside collectives (input wait and everything else it
    # does), ≥ 0: the lesser of two readings that must agree (see ``owned_per_step_s``)
    own_extra_s: float = 0.0
    comm_gpu_hours: float = 0.0  # rank-seconds inside collectives / 3600 (one GPU per rank)
    wait_gpu_hours: float = 0.0
    hours_unit: str = "GPU-hours"  # "process-hours" for ranks without a GPU (set by analysis.bundle)
    clock: str = "host wall clock"
    comm_dollars: float | None = None  # the GPU-hours above at the run's price (set by the report stage)
    wait_dollars: float | None = None

    @property
    def comm_share(self) -> float:
        """Mean over ranks of the share of the step spent inside collectives."""
        return float(np.mean([r.comm_share for r in self.ranks])) if self.ranks else 0.0

    @property
    def wait_share(self) -> float:
        return float(np.mean([r.wait_share for r in self.ranks])) if self.ranks else 0.0

    @property
    def transfer_share(self) -> float:
        vals = [r.transfer_s / r.step_s for r in self.ranks if r.step_s > 0]
        return float(np.mean(vals)) if vals else 0.0

    @property
    def owned_per_step_s(self) -> float:
        """The part of ``lost_per_step_s`` the slow rank's own extra time accounts for.

        A rank that arrives last because it does more (slower storage, more host work, a slower device)
        spends that much longer outside collectives than the others: its own extra time matches their
        wait. Ranks that take turns on a host's cores (a balanced 2-rank gloo job on 2 shared cores) also
        arrive in a fixed order for tens of steps, but the one that arrives last is descheduled *inside*
        its collective while the other runs: its step outside collectives is no longer than theirs, and
        their wait is the host's, not its work (measured: 0.75 ms lost a step, 35 % of a 2.1 ms step,
        against −0.02 ms of own extra time). Only this part would go away if it ran at their pace.

        ``own_extra_s`` is the lesser of two readings of that extra time: the difference of the ranks'
        median step parts (``slow_extra``: data wait + the rest outside collectives) and the median, step by
        step, of its time outside collectives minus the others' in the same step (the ranks run the same
        iterations in lockstep). Where ranks take turns their per-step times are bimodal and either reading
        alone was seen to find a lead the other did not (balanced field script: medians 0.04 ms apart,
        paired 0.57 ms; another recording 0.21 vs 0.02 ms); for a real straggler they agree (rank 1 sleeping
        0.5 / 1 / 2 ms a step: 0.70 vs 0.70, 1.03 vs 1.04, 2.18 vs 2.19 ms)."""
        return min(self.lost_per_step_s, self.own_extra_s)

    @property
    def step_coverage(self) -> float:
        """The least share, over ranks, of steady steps that contain a timed collective (1.0: every step;
        a trace's per-step collective time is per step by construction)."""
        shares = [r.comm_steps / r.steps for r in self.ranks if r.steps]
        return min(shares) if shares else 0.0

    def rank(self, rank: int | None) -> RankComm | None:
        return next((r for r in self.ranks if r.rank == rank), None)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(comm_share=self.comm_share, wait_share=self.wait_share, transfer_share=self.transfer_share,
                 step_coverage=self.step_coverage, owned_per_step_s=self.owned_per_step_s)
        return d


def rank_of(run: Run) -> dict[int, int]:
    """pid → rank for every process that knows its rank; processes with steps only."""
    return {pid: p.rank for pid, p in run.processes.items() if p.rank is not None}


def comm_summary(run: Run) -> CommSummary | None:
    """None unless the run recorded collectives from ≥ 2 ranks."""
    comm = _outside_stalls(run.comm, run.stalls)
    if not len(comm):
        return None
    ranks = rank_of(run)
    pids = [p for p in dict.fromkeys(comm["pid"].tolist()) if p in ranks]
    if len(pids) < 2:
        return None
    arrivals = _match(comm, pids)
    last = _last_arrivals(comm, arrivals)
    per_rank = [_rank_comm(run, comm, pid, ranks[pid], arrivals, last) for pid in pids]
    per_rank.sort(key=lambda r: r.rank)
    world = max([p.world_size or 0 for p in run.processes.values()] + [len(per_rank)])
    summary = _summarize(per_rank, world, arrivals, last)
    slow = summary.rank(summary.slow_rank)
    if slow is not None:
        paired = _own_extra(run, comm, slow.pid, [r.pid for r in per_rank if r is not slow])
        summary.own_extra_s = min(paired, _median_own_extra(summary.slow_extra))
    return summary


def _median_own_extra(extra: dict[str, float]) -> float:
    """The slow rank's median time outside collectives over the others' (``slow_extra``), seconds, ≥ 0."""
    return max(sum(extra.get(p, 0.0) for p in OWN_PARTS), 0.0)


def _own_steps(run: Run, comm: Table, pid: int) -> np.ndarray:
    """A rank's time outside collectives in each steady step (input wait and everything else), ns."""
    m = comm["pid"] == pid
    start = comm["start_ns"][m].astype(np.int64)
    end = np.maximum(comm["end_ns"][m].astype(np.int64), start)
    lo, hi, _ = _steady(*_steps_of(run, pid))
    own: np.ndarray = (hi - lo) - _per_step_union(start, end, lo, hi)
    return own


def _own_extra(run: Run, comm: Table, slow: int, others: list[int]) -> float:
    """Median over steps of the slow rank's time outside collectives minus the others' median in the same
    step (the i-th steady step of every rank: lockstep iterations), seconds, ≥ 0."""
    own = [_own_steps(run, comm, pid) for pid in [slow, *others]]
    n = min(len(x) for x in own)
    if n == 0:
        return 0.0
    theirs = np.median(np.stack([x[:n] for x in own[1:]]), axis=0)
    return max(float(np.median(own[0][:n] - theirs)) / 1e9, 0.0)


def _match(comm: Table, pids: list[int]) -> dict[str, np.ndarray]:
    """For every call: its collective's last arrival and the pid that arrived last (−1: unmatched)."""
    keep = np.isin(comm["pid"], pids)
    group, seq = comm["group"], comm["seq"]
    keys = np.array([f"{g}\x00{s}" for g, s in zip(group, seq)], dtype=object)
    _, inverse = np.unique(keys, return_inverse=True)
    inverse = np.where(keep, inverse, -1)
    n = int(inverse.max()) + 1 if len(inverse) else 0
    start = comm["start_ns"].astype(np.int64)
    last_t = np.full(n, np.iinfo(np.int64).min, np.int64)
    count = np.zeros(n, np.int64)
    valid = inverse >= 0
    np.maximum.at(last_t, inverse[valid], start[valid])
    np.add.at(count, inverse[valid], 1)
    last_pid = np.full(n, -1, np.int64)
    is_last = valid & (start == last_t[np.maximum(inverse, 0)])
    last_pid[inverse[is_last]] = comm["pid"][is_last]
    matched = valid & (count[np.maximum(inverse, 0)] >= 2)
    return {"collective": inverse, "last_ns": np.where(matched, last_t[np.maximum(inverse, 0)], -1),
            "last_pid": np.where(matched, last_pid[np.maximum(inverse, 0)], -1), "matched": matched,
            "n": np.array([int((count >= 2).sum()), int((count == 1).sum())])}


def _last_arrivals(comm: Table, arrivals: dict[str, np.ndarray]) -> dict[int, int]:
    """pid → matched collectives it arrived last at."""
    firsts = np.unique(arrivals["collective"][arrivals["matched"]], return_index=True)[1]
    pids = arrivals["last_pid"][arrivals["matched"]][firsts]
    out: dict[int, int] = {}
    for p in pids.tolist():
        out[p] = out.get(p, 0) + 1
    return out


def _outside_stalls(comm: Table, stalls: list[StallRecord]) -> Table:
    """The collectives that did not sit through a stall the recorder's watch saw (run/stalls.py): a rank stuck
    for 15 s before an all-reduce is a hang, judged as one (analysis/stalls.py), not 15 s of straggling to be
    averaged into the ranks' per-step waits."""
    if not len(comm) or not stalls:
        return comm
    keep = np.ones(len(comm), dtype=bool)
    s, e = comm["start_ns"].astype(np.int64), comm["end_ns"].astype(np.int64)
    for r in stalls:
        end = r.resumed_ns or r.ended_ns or r.seen_ns
        keep &= ~((s < end) & (e > r.since_ns))
    return comm if keep.all() else comm.filter(keep)


def _steps_of(run: Run, pid: int, column: str = "data_wait_ns") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Start, end and one per-step column (≥ 0) of a process's steps, in time order."""
    st = run.steps
    if not len(st) or column not in st:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)
    m = st["pid"] == pid
    order = np.argsort(st["start_ns"][m], kind="stable")
    return (st["start_ns"][m][order].astype(np.int64), st["end_ns"][m][order].astype(np.int64),
            np.maximum(st[column][m][order].astype(np.int64), 0))


def _steady(lo: np.ndarray, hi: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The steps the per-step medians are taken over: the first one (start-up) left out."""
    steady = slice(1, None) if len(lo) > 2 else slice(None)
    return lo[steady], hi[steady], data[steady]


def _per_step_union(s: np.ndarray, e: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each step [lo, hi): how much of it the union of intervals (s, e) covers, ns."""
    us, ue = iv.union(s, e)
    return iv.overlap_each(lo, hi, us, ue).astype(np.int64)


def _rank_comm(run: Run, comm: Table, pid: int, rank: int, arrivals: dict[str, np.ndarray],
               last: dict[int, int]) -> RankComm:
    m = comm["pid"] == pid
    start = comm["start_ns"][m].astype(np.int64)
    end = comm["end_ns"][m].astype(np.int64)
    end = np.where(end >= start, end, start)
    matched = arrivals["matched"][m]
    last_ns = arrivals["last_ns"][m]
    wait_end = np.where(matched, np.minimum(np.maximum(last_ns, start), np.maximum(end, start)), start)
    lo, hi, data = _steady(*_steps_of(run, pid))
    data_cpu = _steady(*_steps_of(run, pid, "data_cpu_ns"))[2]
    data_cpu = np.minimum(data_cpu, data) if len(data_cpu) == len(data) else np.zeros_like(data)
    step = (hi - lo).astype(np.int64)
    comm_step = _per_step_union(start, end, lo, hi)
    wait_step = _per_step_union(start, wait_end, lo, hi)
    other = np.maximum(step - data - comm_step, 0)
    # the wait each *other* rank lost because this one arrived last, inside that rank's steady steps (the
    # same window as its per-step medians: waits during start-up — FSDP's lazy init, DDP's first
    # broadcast — are not per-step losses); over its whole run when it recorded no steps
    caused = 0
    for other_pid in np.unique(comm["pid"]).tolist():
        if other_pid == pid:
            continue
        om = (comm["pid"] == other_pid) & (arrivals["last_pid"] == pid) & arrivals["matched"]
        os_ = comm["start_ns"][om].astype(np.int64)
        oe = np.maximum(arrivals["last_ns"][om], os_)
        waits = iv.union(os_, oe)
        olo, ohi, _ = _steady(*_steps_of(run, other_pid))
        caused += int(iv.overlap_each(olo, ohi, *waits).sum()) if len(olo) else iv.total(*waits)
    proc = run.processes.get(pid)
    total = int(matched.sum())

    def med(x: np.ndarray) -> float:
        return float(np.median(x)) / 1e9 if len(x) else 0.0

    return RankComm(
        rank=rank, pid=pid, host=proc.host if proc else None, local_rank=proc.local_rank if proc else None,
        steps=int(len(step)), collectives=int(m.sum()), bytes=int(comm["bytes"][m].sum()),
        step_s=med(step), comm_s=med(comm_step), wait_s=med(wait_step),
        transfer_s=max(med(comm_step) - med(wait_step), 0.0), data_wait_s=med(data), data_cpu_s=med(data_cpu),
        other_s=med(other),
        total_comm_s=float(comm_step.sum()) / 1e9, total_wait_s=float(wait_step.sum()) / 1e9,
        last_share=last.get(pid, 0) / total if total else 0.0, caused_wait_s=caused / 1e9,
        cpu_pct=_cpu_pct(run, pid), comm_steps=int((comm_step > 0).sum()),
    )


def _cpu_pct(run: Run, pid: int) -> float | None:
    procs = run.procs
    if not len(procs) or "cpu_pct" not in procs:
        return None
    v = procs["cpu_pct"][procs["pid"] == pid].astype(float)
    v = v[np.isfinite(v)]
    return float(v.mean()) if len(v) else None


PARTS = ("data_wait_s", "other_s", "transfer_s")
# the parts of a rank's step outside its collectives (disjoint: other = step − input wait − collectives)
OWN_PARTS = ("data_wait_s", "other_s")
# not a part of the step but what one part is made of: the CPU the slow rank's main thread used while
# the step waited for its input (sleeping on storage ≈ 0; computing in the loop ≈ the whole wait)
DETAILS = ("data_cpu_s",)


def _summarize(per_rank: list[RankComm], world: int, arrivals: dict[str, np.ndarray],
               last: dict[int, int]) -> CommSummary:
    matched, unmatched = (int(x) for x in arrivals["n"])
    total_caused = sum(r.caused_wait_s for r in per_rank)
    slow = max(per_rank, key=lambda r: r.caused_wait_s) if total_caused > 0 else None
    extra: dict[str, float] = {}
    lost = lost_step = 0.0
    gross = 0.0
    if slow is not None:
        others = [r for r in per_rank if r is not slow]
        # What the others wait for it beyond what it waits for them: on a busy host every rank is sometimes
        # descheduled and arrives late, so ranks wait for each other a little even when balanced (a job
        # with 9 small collectives a step — FSDP2 — measured 2.4-5 ms a step each way). The slow rank's own
        # wait estimates that jitter; only the excess would go away if it ran at their pace (2 ranks:
        # exactly the pairwise excess; more: conservative, as it waits for the last of all the others).
        gross = slow.caused_wait_s
        lost = max(gross - len(others) * slow.total_wait_s, 0.0)
        steps = [r.steps for r in others if r.steps]
        lost_step = lost / len(others) / float(np.median(steps)) if steps else 0.0
        for part in PARTS + DETAILS:
            extra[part] = getattr(slow, part) - float(np.median([getattr(r, part) for r in others]))
    return CommSummary(
        world_size=world, ranks=per_rank, matched=matched, unmatched=unmatched,
        slow_rank=slow.rank if slow else None,
        slow_caused_share=slow.caused_wait_s / total_caused if slow and total_caused else 0.0,
        lost_s=lost, lost_per_step_s=lost_step, lost_gross_s=gross, slow_extra=extra,
        comm_gpu_hours=sum(r.total_comm_s for r in per_rank) / 3600.0,
        wait_gpu_hours=sum(r.total_wait_s for r in per_rank) / 3600.0,
    )


def trace_comm_summary(traces: list[TraceAnalysis]) -> CommSummary | None:
    """The same cross-rank view from per-rank profiler traces (``analysis.trace.TraceAnalysis``).

    A trace has no host arrival times, but a collective kernel on the device spins from its own rank's
    arrival until the last rank's, then moves the data: kernel time = wait + transfer. The transfer is
    the same on every rank of a symmetric collective, so the rank with the least collective time per step
    is the one everybody waited for, and each other rank's excess over it is its wait.
    """
    ranked = [(t.rank, t) for t in traces if t.steps and t.rank is not None]
    if len(ranked) < 2:
        return None
    rows: list[tuple[int, float, float, int, dict[str, float]]] = []  # rank, comm, step, steps, parts
    for rank, t in ranked:
        comm = [s.partition.get("comm", 0.0) + s.comm_overlapped_s for s in t.steps]
        dur = [s.duration_s for s in t.steps]
        parts: dict[str, list[float]] = {}
        for s in t.steps:
            for k, v in s.partition.items():
                if k != "comm":
                    parts.setdefault(k, []).append(v)
        rows.append((rank, float(np.median(comm)), float(np.median(dur)), len(dur),
                     {k: float(np.median(v + [0.0] * (len(dur) - len(v)))) for k, v in parts.items()}))
    floor = min(r[1] for r in rows)
    slow_i = int(np.argmin([r[1] for r in rows]))
    per_rank = []
    for i, (rank, comm_s, step_s, n, _) in enumerate(rows):
        wait = comm_s - floor
        caused = sum((c - floor) * m for j, (_, c, _, m, _) in enumerate(rows) if j != i) if i == slow_i else 0.0
        data = 0.0  # a trace's partition has no input-pipeline category: host idle is the host's
        per_rank.append(RankComm(
            rank=rank, pid=-1, host=None, local_rank=None, steps=n, collectives=0, bytes=0,
            step_s=step_s, comm_s=comm_s, wait_s=wait, transfer_s=floor, data_wait_s=data, data_cpu_s=0.0,
            other_s=max(step_s - comm_s - data, 0.0), total_comm_s=comm_s * n, total_wait_s=wait * n,
            last_share=None, caused_wait_s=caused if len(rows) > 1 else 0.0,
            comm_steps=n if comm_s > 0 else 0))
    slow = per_rank[slow_i]
    others = [r for r in per_rank if r is not slow]
    lost = slow.caused_wait_s
    steps = float(np.median([r.steps for r in others]))
    extra = {part: getattr(slow, part) - float(np.median([getattr(r, part) for r in others])) for part in PARTS}
    slow_parts, other_parts = rows[slow_i][4], [r[4] for j, r in enumerate(rows) if j != slow_i]
    for k in ("compute", "idle_host", "idle_optimizer_cpu"):  # where a trace says the slow rank's time went
        if k in slow_parts:
            extra[k + "_s"] = slow_parts[k] - float(np.median([p.get(k, 0.0) for p in other_parts]))
    return CommSummary(
        world_size=len(per_rank), ranks=sorted(per_rank, key=lambda r: r.rank), matched=0, unmatched=0,
        slow_rank=slow.rank if lost > 0 else None, slow_caused_share=1.0 if lost > 0 else 0.0, lost_s=lost,
        lost_gross_s=lost,
        lost_per_step_s=lost / len(others) / steps if steps else 0.0, slow_extra=extra,
        own_extra_s=_median_own_extra(extra),
        comm_gpu_hours=sum(r.total_comm_s for r in per_rank) / 3600.0,
        wait_gpu_hours=sum(r.total_wait_s for r in per_rank) / 3600.0,
        clock="device (profiler trace: collective kernel time per step)",
    )


def job_comm(run: Run, traces: list[TraceAnalysis]) -> CommSummary | None:
    """The job's cross-rank view: the hook's matched collectives when recorded, else the traces'."""
    return comm_summary(run) or trace_comm_summary(traces)


def price(summary: CommSummary | None, per_gpu_hour: float | None) -> None:
    """What the job's communication and waiting cost at ``per_gpu_hour`` per rank-hour (one GPU per rank;
    on CPU, the rank's share of its machine)."""
    if summary is None or per_gpu_hour is None:
        return
    summary.comm_dollars = summary.comm_gpu_hours * per_gpu_hour
    summary.wait_dollars = summary.wait_gpu_hours * per_gpu_hour
