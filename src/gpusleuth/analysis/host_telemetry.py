"""Summaries of the host's sampled telemetry over the run, and of the job's processes: which process is the
training loop and which are its DataLoader workers, how busy each was while the steps ran, what they wanted of
the CPU (schedstat), what the loading read, and what other processes took from the host.

Distributions and counters as ``telemetry`` (the GPU summaries) makes them: over time, never one number.
"""

from __future__ import annotations

import math

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from gpusleuth.analysis.telemetry import Dist, _columns, _counter_delta, _dist, samples_around
from gpusleuth.run.meta import on_first_host
from gpusleuth.run.model import Run, Table


@dataclass
class ProcessSummary:
    pid: int
    role: str
    name: str
    cpu_pct: Dist | None  # % of one core, over the samples
    rss_max_bytes: float | None


@dataclass
class HostSummary:
    samples: int
    logical_cores: int | None
    cpu_pct: Dist | None
    iowait_pct: Dist | None
    mem_used_max_bytes: float | None
    mem_total_bytes: float | None
    disk_read_bytes: float | None
    disk_write_bytes: float | None
    net_rx_bytes: float | None
    net_tx_bytes: float | None
    cgroup_throttled_share: float | None  # share of cgroup CPU periods that were throttled
    main_pid: int | None
    processes: list[ProcessSummary]
    workers: int  # DataLoader worker processes seen
    worker_cpu_pct_mean: float | None  # mean over workers of their mean CPU (% of one core)
    main_cpu_pct_mean: float | None
    # share of worker samples in the run state (running or waiting for a CPU): a worker starved of CPU
    # uses little of a core yet is CPU-bound; one waiting on storage sleeps
    worker_runnable_share: float | None = None
    # the same for the training process's main thread: the share of its samples in state R (running or
    # waiting for a CPU). Its CPU ÷ that share is how much of the time it wanted a CPU it got one — the one
    # measure of a shared host's toll on *this* job (a job that sleeps by design uses little CPU and is
    # seldom runnable; one starved by other processes is runnable and gets little)
    main_runnable_share: float | None = None
    # From the main threads' /proc schedstat clocks over the steps (exact, not sampled): the share of the time
    # the training process's main thread wanted a CPU — ran, or was runnable and waited for one — and the share
    # it waited; the same demand for loader workers (mean over workers). A thread that sleeps on storage wants
    # none; one that computes wants one all along, whether it gets one or other processes take it.
    main_cpu_demand: float | None = None
    main_run_delay_share: float | None = None
    worker_cpu_demand: float | None = None
    # host CPU while the training steps ran (the window): what a saturation test should look at, since
    # start-up (imports, one busy thread) and the idle tail would dilute a whole-run percentile
    cpu_pct_steps: Dist | None = None
    # Cores the job's own process tree used during the steps (the whole run when it has none, e.g. a server)
    # — summed at each sampling time, averaged over the times (cores_by_process) — and the cores the rest of the
    # host used meanwhile (host busy − job): other users' work on a shared machine, which slows and starves the
    # job in ways no knob of the job removes.
    job_cores_steps: float | None = None
    # how many of the job's processes were sampled then; a job merged from several machines' directories: the ranks
    # on the machine whose host samples these are (``job_cores_steps`` counts that machine's processes only —
    # host busy minus every node's CPU called a crowded node quiet), None for one directory
    job_processes: int | None = None
    host_ranks: list[int] | None = None
    foreign_cores_steps: float | None = None
    # What the loading processes (the DataLoader workers; the main process when there are none) read during the
    # steps, from /proc/PID/io: bytes brought from storage (read_bytes: page-cache hits not counted), and bytes
    # their read calls returned from anything — files, the page cache, sockets, pipes (rchar). A loader that
    # read almost nothing waited on no storage and no network: its data was in memory.
    loader_read_bytes: float | None = None
    loader_read_chars: float | None = None
    # A server (requests recorded, or driven by `gpusleuth load`): every process of the job's tree while it served
    # (the load levels' span, else its requests'), summed per sampling time, in cores — LitServe's inference
    # workers beside its uvicorn process, Ray's replica, proxy and raylet — and how many of those processes used
    # any CPU then. The main process alone is the launcher of a server that runs in its children (LitServe: 6 %).
    server_cores: float | None = None
    server_processes: int | None = None

    @property
    def main_cpu_attained(self) -> float | None:
        """Of the time the training loop's thread was runnable, the share it ran (≤ 1); None unmeasured. From its
        schedstat clocks where recorded — ran ÷ (ran + waited for a CPU), exact over the steps — else from the
        samples: the process's CPU ÷ the share of samples that found its main thread in state R (10 Hz: a loop
        that runs in bursts between sleeps is seldom caught runnable, and all its threads' CPU counts)."""
        demand, waited = self.main_cpu_demand, self.main_run_delay_share
        if demand is not None and waited is not None:
            return None if demand < 0.05 else min(max((demand - waited) / demand, 0.0), 1.0)
        if self.main_cpu_pct_mean is None or not self.main_runnable_share or self.main_runnable_share < 0.05:
            return None
        return min(self.main_cpu_pct_mean / 100 / self.main_runnable_share, 1.0)

    def crowded_cores(self, cores: int | None = None) -> float | None:
        """Cores other processes used while the steps ran, when they crowded a busy host (else None): the
        one test of a shared machine, for the contention rule and for compare's noise note."""
        cores = cores or self.logical_cores
        busy = self.cpu_pct_steps or self.cpu_pct
        if self.foreign_cores_steps is None or not cores or not busy:
            return None
        if self.foreign_cores_steps < FOREIGN_SHARE * cores or busy["p50"] < FOREIGN_BUSY_PCT:
            return None
        return self.foreign_cores_steps


FOREIGN_SHARE = 0.25  # share of the host's cores other processes used during the steps
FOREIGN_BUSY_PCT = 85.0  # … while the host was this busy: only then do they take CPU from the job


def assign_roles(run: Run, main_pid: int | None) -> dict[int, str]:
    """Name each process of the tree: the training loop, DataLoader workers, or other.

    The hook's own header is the best evidence; a forked child of the main process with the same name
    that the hook did not report is taken as a worker too (a fork inherits the parent's name) — only when
    the main process built a DataLoader with workers: torch.compile's inductor forks a pool of compile
    workers of the same name, which a loop without a DataLoader showed as "3 DataLoader workers at 50 %".
    """
    roles: dict[int, str] = {pid: p.role for pid, p in run.processes.items()}
    if main_pid is not None:
        roles[main_pid] = "main"
    procs = run.procs
    has_workers = any(i.get("kind") == "dataloader" and (i.get("num_workers") or 0) > 0
                      and i.get("pid", main_pid) == main_pid for i in run.infos)
    if len(procs) and main_pid is not None and has_workers:
        pids = procs["pid"].astype(int)
        ppids = procs["ppid"].astype(float)
        names = procs["name"]
        main_names = {str(n) for n in names[pids == main_pid]}
        for pid, ppid, name in zip(pids, ppids, names):
            if pid not in roles and ppid == main_pid and str(name) in main_names:
                roles[int(pid)] = "dataloader_worker"
    return roles


MIN_DEMAND_SPAN_NS = 200_000_000  # two schedstat readings closer than this say little about a share of time



@dataclass(frozen=True)
class ProcessCores:
    """The CPU a set of the job's processes used over a window, from the process sampler, in cores. Every live
    process of the tree is sampled at each sampling time, so a process missing at a time used none then (it had
    not started, or had ended): each time's CPU is summed over the set, and averages are over the window's times
    — never over each process's own samples, which would count two processes that ran one after the other (a
    DataLoader's workers of successive epochs) as running side by side."""

    times: np.ndarray  # the window's sampling times (ns)
    per_time: np.ndarray  # cores the set used at each of them, summed over its processes
    per_process: dict[int, float]  # each process's cores averaged over the same times (they sum to ``mean``)

    @property
    def mean(self) -> float:
        """The correctly rounded sum of ``per_process``: never below :attr:`busiest` — ``per_time.mean()`` is the
        same number summed in another order and can land one rounding step under the busiest process alone."""
        return math.fsum(self.per_process.values())

    @property
    def p90(self) -> float:
        return float(np.percentile(self.per_time, 90))

    @property
    def busiest(self) -> float:
        return max(self.per_process.values())

    @property
    def busy_processes(self) -> int:
        """How many of the set's processes used any CPU in the window."""
        return sum(1 for c in self.per_process.values() if c > 0)


def cores_by_process(procs: Table, window: tuple[int, int] | None,
                     pids: Iterable[int] | None = None) -> ProcessCores | None:
    """The one derivation of "the cores these processes used over this window" (``pids``: the set; None: every
    process sampled). ``window`` (ns) picks its samples by :func:`samples_around` — a window holding fewer than
    two sampling times is widened to the nearest ones, since not measured must not read as "no other load";
    None takes every sample. None when the window has no measured sample of the set.

    A job read from several directories (sources/jobdirs.py) marks each sample with its directory
    (``procs.node``): each directory's recorder sampled at its own times, so each is averaged over its own times
    and the directories are added (pooled, the times interleave and each time sums one directory's processes
    only: half a two-node job's CPU)."""
    if not len(procs) or not {"t_ns", "pid", "cpu_pct"} <= set(procs.columns):
        return None
    t = np.asarray(procs["t_ns"], dtype=np.int64)
    pid = np.asarray(procs["pid"], dtype=np.int64)
    cpu = np.asarray(procs["cpu_pct"], dtype=np.float64)
    m = np.isfinite(cpu)
    if window is not None:
        around = samples_around(t, window)
        if around is None:
            return None
        m &= around
    if pids is not None:
        chosen = np.isin(pid, list(pids))
        if not (m & chosen).any():
            return None
    else:
        chosen = np.ones(len(t), dtype=bool)
    if "node" not in procs.columns:
        return _cores_on_one_clock(t[m], pid[m], cpu[m], chosen[m])
    node = np.asarray(procs["node"])
    parts = [got for one in (m & (node == n) for n in np.unique(node[m & chosen]).tolist())
             if (got := _cores_on_one_clock(t[one], pid[one], cpu[one], chosen[one])) is not None]
    return _added(parts) if len(parts) > 1 else (parts[0] if parts else None)


def _cores_on_one_clock(t: np.ndarray, pid: np.ndarray, cpu: np.ndarray, chosen: np.ndarray) -> ProcessCores | None:
    """:func:`cores_by_process` over the samples of one recorder (every process sampled at each of its times)."""
    times, at = np.unique(t, return_inverse=True)
    if not chosen.any():
        return None
    per_time = np.bincount(at[chosen], weights=cpu[chosen], minlength=len(times)) / 100.0
    who, of = np.unique(pid[chosen], return_inverse=True)
    used = np.bincount(of, weights=cpu[chosen]) / 100.0 / len(times)
    return ProcessCores(times=times, per_time=per_time, per_process=dict(zip(who.tolist(), used.tolist())))


def _added(parts: list[ProcessCores]) -> ProcessCores:
    """Several recorders' cores as one set: each process its own average; at each of all their sampling times,
    each recorder's latest sample (none before its first or after its last)."""
    times = np.unique(np.concatenate([p.times for p in parts]))
    per_time = np.zeros(len(times))
    for p in parts:
        i = np.searchsorted(p.times, times, side="right") - 1
        inside = (i >= 0) & (times <= p.times[-1])
        per_time[inside] += p.per_time[i[inside]]
    per_process: dict[int, float] = {}
    for p in parts:
        per_process.update(p.per_process)  # pids are renumbered apart when directories are merged
    return ProcessCores(times=times, per_time=per_time, per_process=per_process)


def server_cpu(run: Run, window: tuple[int, int]) -> tuple[float, int] | None:
    """(cores, processes) of the whole job's tree over ``window``: :func:`cores_by_process` over every process;
    the processes that used any CPU. None without two sampling times."""
    got = cores_by_process(run.procs, window)
    return (got.mean, got.busy_processes) if got is not None else None

def cpu_demand(p: Table) -> tuple[float, float] | None:
    """(share of the time a process's main thread ran or waited runnable for a CPU, share it waited) between its
    first and last samples in ``p`` (one process's rows, in time order), from the cumulative schedstat clocks;
    None where they were not recorded (older runs, other systems) or span too little time."""
    if "run_delay_ns" not in p or "thread_cpu_ns" not in p or len(p) < 2:
        return None
    t = np.asarray(p["t_ns"], dtype=np.float64)
    ran = np.asarray(p["thread_cpu_ns"], dtype=np.float64)
    delay = np.asarray(p["run_delay_ns"], dtype=np.float64)
    ok = np.isfinite(ran) & np.isfinite(delay)
    if ok.sum() < 2:
        return None
    t, ran, delay = t[ok], ran[ok], delay[ok]
    span = t[-1] - t[0]
    if span < MIN_DEMAND_SPAN_NS:
        return None
    d_ran, d_delay = max(ran[-1] - ran[0], 0.0), max(delay[-1] - delay[0], 0.0)
    return min((d_ran + d_delay) / span, 1.0), min(d_delay / span, 1.0)


def job_cores_on_sampled_host(run: Run, procs: Table) -> tuple[ProcessCores | None, list[int] | None]:
    """(the cores the job's processes used on the machine the host samples describe, the ranks recorded there —
    None for a single directory). A job read from several directories (sources/jobdirs.py) holds the first
    directory's host samples and every directory's process samples, each marked with its directory; directories
    recorded on that same machine (one per rank on one node) share its host samples. Host busy minus every
    node's CPU would call a crowded node quiet."""
    nodes = run.meta.get("nodes") or []
    if not nodes or "node" not in procs.columns:
        return cores_by_process(procs, None), None
    same = on_first_host(nodes)
    ranks = sorted({r for i in same for r in nodes[i].get("ranks") or []})
    return cores_by_process(procs.filter(np.isin(np.asarray(procs["node"]), same)), None), ranks


def summarize_host(run: Run, main_pid: int | None, roles: dict[int, str],
                   window: tuple[int, int] | None = None) -> HostSummary | None:
    """Host and process summary; ``roles``: each process's role (:func:`assign_roles`, computed once by
    ``analyze``); ``window`` (ns) limits process CPU to the training steps, so start-up and the idle tail
    don't dilute how busy the loader workers were while it mattered."""
    host = run.host
    if not len(host) and not len(run.procs):
        return None
    col = _columns(host)
    hw = (run.meta.get("recorder") or {}).get("host") or {}
    cg = None
    if "cg_nr_periods" in host and len(host):
        periods = _counter_delta(col("cg_nr_periods"))
        throttled = _counter_delta(col("cg_nr_throttled"))
        if periods:
            cg = (throttled or 0.0) / periods
    processes: list[ProcessSummary] = []
    procs = run.procs
    if len(procs) and window is not None:
        in_window = samples_around(procs["t_ns"], window)
        if in_window is not None:
            procs = procs.filter(in_window)
    worker_means: list[float] = []
    worker_demands: list[float] = []
    reads: dict[str, dict[str, list[float]]] = {"dataloader_worker": {}, "main": {}}  # role → column → per-pid deltas
    main_demand: tuple[float, float] | None = None
    main_mean = None
    main_runnable: float | None = None
    runnable: list[bool] = []
    if len(procs):
        pids = procs["pid"].astype(int)
        for pid in np.unique(pids):
            p = procs.filter(pids == pid)
            cpu = _dist(p["cpu_pct"]) if "cpu_pct" in p else None
            rss = p["rss_bytes"].astype(float) if "rss_bytes" in p else np.array([np.nan])
            role = roles.get(int(pid), "other")
            summary = ProcessSummary(
                pid=int(pid),
                role=role,
                name=str(p["name"][0]) if "name" in p else "",
                cpu_pct=cpu,
                rss_max_bytes=float(np.nanmax(rss)) if np.isfinite(rss).any() else None,
            )
            processes.append(summary)
            if role in reads:
                for column in ("read_bytes", "read_chars"):
                    if column in p:
                        got = _counter_delta(p[column])
                        if got is not None:
                            reads[role].setdefault(column, []).append(got)
            demand = cpu_demand(p)
            if role == "dataloader_worker" and demand is not None:
                worker_demands.append(demand[0])
            if role == "main" and demand is not None:
                main_demand = demand
            if role == "dataloader_worker" and cpu:
                worker_means.append(cpu["mean"])
                if "status" in p:
                    runnable.extend(str(x) == "running" for x in p["status"][1:])
            if role == "main" and "status" in p and len(p) > 1:
                main_runnable = float(np.mean([str(x) == "running" for x in p["status"][1:]]))
            if role == "main" and cpu:
                main_mean = cpu["mean"]
    mem_used = col("mem_used").astype(float)
    mem_total = col("mem_total").astype(float)
    cpu_steps = None
    if window is not None and len(host) and "t_ns" in host:
        in_steps = samples_around(host["t_ns"], window)
        if in_steps is not None:
            cpu_steps = _dist(host["cpu_pct"][in_steps]) if "cpu_pct" in host else None
    job, host_ranks = job_cores_on_sampled_host(run, procs)  # ``procs``: the window's samples already
    job_cores = job.mean if job is not None else None
    foreign = None
    cores = hw.get("logical_cores")
    busy = cpu_steps if window is not None else _dist(col("cpu_pct"))  # a server has no steps: its whole run
    if busy is not None and job_cores is not None and cores:
        foreign = max(busy["mean"] / 100 * cores - job_cores, 0.0)
    loading = reads["dataloader_worker"] if any(p.role == "dataloader_worker" for p in processes) else reads["main"]
    return HostSummary(
        samples=len(host),
        logical_cores=hw.get("logical_cores"),
        cpu_pct=_dist(col("cpu_pct")),
        iowait_pct=_dist(col("iowait_pct")),
        mem_used_max_bytes=float(np.nanmax(mem_used)) if np.isfinite(mem_used).any() else None,
        mem_total_bytes=float(np.nanmax(mem_total)) if np.isfinite(mem_total).any() else None,
        disk_read_bytes=_counter_delta(col("disk_read_bytes")),
        disk_write_bytes=_counter_delta(col("disk_write_bytes")),
        net_rx_bytes=_counter_delta(col("net_rx_bytes")),
        net_tx_bytes=_counter_delta(col("net_tx_bytes")),
        cgroup_throttled_share=cg,
        main_pid=main_pid,
        processes=processes,
        workers=sum(1 for p in processes if p.role == "dataloader_worker"),
        worker_cpu_pct_mean=float(np.mean(worker_means)) if worker_means else None,
        main_cpu_pct_mean=main_mean,
        worker_runnable_share=float(np.mean(runnable)) if runnable else None,
        main_runnable_share=main_runnable,
        main_cpu_demand=main_demand[0] if main_demand else None,
        main_run_delay_share=main_demand[1] if main_demand else None,
        worker_cpu_demand=float(np.mean(worker_demands)) if worker_demands else None,
        cpu_pct_steps=cpu_steps,
        job_cores_steps=job_cores,
        job_processes=len(job.per_process) if job is not None else None,
        host_ranks=host_ranks,
        foreign_cores_steps=foreign,
        loader_read_bytes=sum(loading["read_bytes"]) if loading.get("read_bytes") else None,
        loader_read_chars=sum(loading["read_chars"]) if loading.get("read_chars") else None,
    )
