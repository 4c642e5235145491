"""Several run directories of one job (one ``gpusleuth run`` per node or per rank) as one :class:`Run`.

A scheduler starts a job's ranks on several machines (``srun``, ``mpirun``, one ``torchrun`` per node), so
each machine's recording is its own directory. ``gpusleuth report runs/node*`` reads them as one job:

* **which directories belong together**: the ranks the hook saw (rank, world size, job id from
  ``TORCHELASTIC_RUN_ID``/``SLURM_JOB_ID``). Two directories holding the same rank, or different job ids, or
  different world sizes, are not one job — a sentence, not a silently wrong merge.
* **clocks**: every timestamp is the recording machine's wall clock. NTP keeps machines within about a
  millisecond, but a skewed node would shift every cross-rank wait by its offset, so the offset is measured
  from the data: a blocking collective (gloo, or a CPU op; ``device_ns`` −1) returns on every rank at the
  same instant, so the median difference of the return times of the collectives two directories share is
  their clock offset. Each directory's times are moved onto the first directory's clock. When no blocking
  collective is shared (NCCL, whose host return is only the launch), clocks stay as recorded, and the report
  says so.
* **identities**: process ids are per machine, so a pid seen in two directories is renumbered in the later
  one (and said); GPU indices are per machine, so each directory's GPUs follow the previous one's.
* **stalls**: each node's recorder watched its own ranks (recorder/stallwatch.py) and saw only them: one
  stalled rank 1 outside any collective, the other ranks 0, 2, 3 waiting inside one. Stalls of different
  directories that overlap in time are one stall of the job, with every node's processes and stacks, so the
  verdict is made across nodes (analysis/stalls.py).
* **telemetry**: GPU, per-process and GPU-process samples are merged (each device and process its own
  series). Host samples are per machine and their counters cumulative, so they cannot be interleaved: the
  job's host table is the first directory's, and the report says which node that is. Each process sample
  keeps its directory (``procs.node``), so the job's CPU set against those host samples is that machine's
  processes' (analysis/host_telemetry.py), never every node's.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from gpusleuth.errors import InputError
from gpusleuth.run.meta import RecorderMeta, RunMeta, on_first_host
from gpusleuth.run.model import ProcessInfo, Run, Table
from gpusleuth.run.records import GpuHardware
from gpusleuth.run.stalls import StallRecord

_TIME_COLUMNS = {
    "steps": ("start_ns", "end_ns"), "phases": ("start_ns", "end_ns"), "comm": ("start_ns", "end_ns"),
    "gpu": ("t_ns",), "gpu_procs": ("t_ns",), "procs": ("t_ns", "start_ns"), "requests": ("start_ns", "end_ns"),
}
_MERGED = ("steps", "phases", "comm", "gpu", "gpu_procs", "procs", "requests")
MIN_SHARED = 3  # collectives two directories must share before their clock offset is trusted


def load_job(paths: list[Path]) -> Run:
    """Read each run directory and merge them into one job (:func:`merge_runs`)."""
    from gpusleuth.sources.rundir import load_run

    return merge_runs([load_run(p) for p in paths])


def merge_runs(runs: list[Run]) -> Run:
    """One job's runs (one per node or rank) as one Run on the first run's clock."""
    if len(runs) == 1:
        return runs[0]
    _check_one_job(runs)
    offsets, how = zip(*[(0, "reference clock")] + [clock_offset(runs[0], r) for r in runs[1:]])
    notes: list[str] = []
    used_pids: set[int] = set()
    gpu_base = 0
    parts: dict[str, list[Table]] = {name: [] for name in _MERGED}
    processes: dict[int, ProcessInfo] = {}
    profiles: list[Run] = []
    logs: list[dict[str, Any]] = []
    infos: list[dict[str, Any]] = []
    devices: list[GpuHardware] = []
    stalls: list[tuple[str, StallRecord]] = []
    diagnostics: dict[str, dict[str, Any]] = {}  # why each GPU's columns are empty, re-keyed by the merged indices
    for i, (run, offset) in enumerate(zip(runs, offsets)):
        pid_map = _pid_map(run, used_pids)
        if any(a != b for a, b in pid_map.items()):
            notes.append(f"{_name(run)}: process ids also used in an earlier directory were renumbered "
                         f"({', '.join(f'{a}→{b}' for a, b in pid_map.items() if a != b)})")
        n_gpus = _gpu_count(run)
        for name in _MERGED:
            table = _moved(getattr(run, name), name, -offset, pid_map, gpu_base)
            if name == "procs" and len(table):  # which directory sampled it: the host samples are one machine's
                table = Table({**table.columns, "node": np.full(len(table), i, dtype=np.int32)})
            if len(table):
                parts[name].append(table)
        for pid, info in run.processes.items():
            processes[pid_map.get(pid, pid)] = replace(info, pid=pid_map.get(pid, pid))
        for d in (run.meta.get("recorder") or {}).get("gpu") or []:
            moved: GpuHardware = {**d, "index": d.get("index", 0) + gpu_base, "node": _name(run)}
            parent = d.get("parent")
            if parent is not None:  # a MIG instance names its GPU by index: moved with it
                moved["parent"] = parent + gpu_base
            devices.append(moved)
        for k, v in ((run.meta.get("recorder") or {}).get("gpu_diagnostics") or {}).items():
            diagnostics[str(int(k) + gpu_base)] = v
        profiles.extend(run.profiles)
        logs.extend(_moved_record(x, -offset, pid_map) for x in run.logs)
        infos.extend(_moved_record(x, -offset, pid_map) for x in run.infos)
        gpu_base += n_gpus
        stalls.extend((_name(run), _moved_stall(s, -offset, pid_map)) for s in run.stalls)
        notes.extend(f"{_name(run)}: {loss}" for loss in run.losses)
    first = runs[0]
    meta: RunMeta = {**first.meta}
    starts = [r.meta.get("start_ns") - o for r, o in zip(runs, offsets) if r.meta.get("start_ns") is not None]
    ends = [r.meta.get("end_ns") - o for r, o in zip(runs, offsets) if r.meta.get("end_ns") is not None]
    codes = [r.meta.get("exit_code") for r in runs if r.meta.get("exit_code")]
    meta.update({
        "label": f"{len(runs)} run directories of one job",
        "start_ns": min(starts) if starts else None, "end_ns": max(ends) if ends else None,
        "exit_code": codes[0] if codes else first.meta.get("exit_code"),
        "nodes": [{"path": str(r.path) if r.path else None, "clock_offset_ns": int(o), "clock": h,
                   "ranks": sorted({p.rank for p in r.processes.values() if p.rank is not None}),
                   "hostname": r.meta.get("hostname")}
                  for r, o, h in zip(runs, offsets, how)],
    })
    if devices:
        recorder: RecorderMeta = {**(first.meta.get("recorder") or {}), "gpu": devices}
        if diagnostics:
            recorder["gpu_diagnostics"] = diagnostics
        meta["recorder"] = recorder
    merged = Run(meta=meta, path=first.path, host=first.host, processes=processes, profiles=profiles,
                 logs=logs, infos=infos, losses=notes)
    for name, tables in parts.items():
        setattr(merged, name, _concat(tables))
    merged.stalls = merge_stalls(stalls)
    elsewhere = set(range(len(runs))) - set(on_first_host(meta["nodes"]))
    if any(len(runs[i].host) for i in elsewhere):
        merged.losses.append(f"host samples (CPU, memory, disk, network) are {_name(first)}'s; each other "
                             "node's are in its own directory (`gpusleuth report DIR`)")
    unaligned = [_name(r) for r, h in zip(runs[1:], how[1:]) if not h.startswith("aligned")]
    if unaligned:
        merged.losses.append(f"clocks of {', '.join(unaligned)} taken as recorded (no blocking collective shared "
                             f"with {_name(first)} to align them by): cross-rank waits assume NTP-synced clocks")
    return merged


def clock_offset(ref: Run, other: Run) -> tuple[int, str]:
    """``other``'s clock minus ``ref``'s, in ns, from the return times of the blocking collectives they share.

    A blocking collective returns on every rank when its last rank arrives (plus the transfer), so the
    return times of one collective agree across ranks to well under a millisecond on a real network; the
    median over all shared collectives is robust to the few that a descheduled process returned late from."""
    a, b = _blocking_returns(ref), _blocking_returns(other)
    shared = sorted(set(a) & set(b))
    if len(shared) < MIN_SHARED:
        return 0, "as recorded"
    diffs = np.array([b[k] - a[k] for k in shared], dtype=np.int64)
    offset = int(np.median(diffs))
    spread = float(np.percentile(np.abs(diffs - offset), 90)) / 1e6
    return offset, f"aligned on {len(shared)} shared collectives (offset {offset / 1e6:+.3f} ms, p90 residual " \
                   f"{spread:.3f} ms)"


def _blocking_returns(run: Run) -> dict[tuple[str, int], int]:
    """(group, seq) → the earliest return time among this run's ranks, for host-blocking collectives."""
    comm = run.comm
    if not len(comm) or "device_ns" not in comm:
        return {}
    keep = np.asarray(comm["device_ns"]) < 0
    out: dict[tuple[str, int], int] = {}
    for g, s, e in zip(comm["group"][keep], comm["seq"][keep], comm["end_ns"][keep]):
        key = (str(g), int(s))
        out[key] = min(out.get(key, int(e)), int(e))
    return out


def _check_one_job(runs: list[Run]) -> None:
    seen: dict[int, Run] = {}
    worlds, jobs = set(), set()
    for run in runs:
        ranks = {p.rank for p in run.processes.values() if p.rank is not None}
        if not ranks:
            raise InputError(run.path or _name(run), "holds no rank identity (RANK / torch.distributed), so it "
                             "cannot be placed in a multi-directory job; report it on its own")
        for rank in ranks:
            if rank in seen:
                raise InputError(run.path or _name(run), f"holds rank {rank}, as does {_name(seen[rank])}: these "
                                 "are not the nodes of one job (report them on their own, or compare them)")
            seen[rank] = run
        worlds |= {p.world_size for p in run.processes.values() if p.world_size}
        jobs |= {p.job_id for p in run.processes.values() if p.job_id}
    if len(worlds) > 1:
        raise InputError(runs[0].path or _name(runs[0]), f"the directories disagree on the world size "
                         f"({', '.join(map(str, sorted(worlds)))}): not one job")
    if len(jobs) > 1:
        raise InputError(runs[0].path or _name(runs[0]), f"the directories belong to different jobs "
                         f"({', '.join(sorted(jobs))})")


def _pid_map(run: Run, used: set[int]) -> dict[int, int]:
    pids: set[int] = set(run.processes)
    for name in ("steps", "comm", "procs", "gpu_procs", "phases", "requests"):
        t = getattr(run, name)
        if len(t) and "pid" in t:
            pids |= set(np.unique(t["pid"]).astype(int).tolist())
    out = {}
    for pid in sorted(pids):
        new = pid
        while new in used:
            new += 1 << 22  # above Linux's pid_max: cannot collide with a real pid
        used.add(new)
        out[pid] = new
    return out


def _moved(table: Table, name: str, shift: int, pid_map: dict[int, int], gpu_base: int) -> Table:
    if not len(table):
        return table
    cols = dict(table.columns)
    for c in _TIME_COLUMNS.get(name, ()):
        if c in cols and shift:
            v = np.asarray(cols[c], dtype=np.int64)
            cols[c] = np.where(v > 0, v + shift, v)  # −1 / 0 mean "unknown" and stay so
    for c in ("pid", "ppid"):
        if c in cols and any(a != b for a, b in pid_map.items()):
            v = np.asarray(cols[c], dtype=np.int64)
            cols[c] = np.array([pid_map.get(int(x), int(x)) for x in v], dtype=np.int64)
    if "gpu" in cols and gpu_base:
        cols["gpu"] = np.asarray(cols["gpu"]) + gpu_base
    return Table(cols)


def _moved_record(record: Any, shift: int, pid_map: dict[int, int]) -> Any:
    """A log or info record (a dict with ``t_ns`` and ``pid``) on the job's clock and pids."""
    if not isinstance(record, dict):
        return record
    out = dict(record)
    if isinstance(out.get("t_ns"), int) and shift:
        out["t_ns"] += shift
    if out.get("pid") in pid_map:
        out["pid"] = pid_map[out["pid"]]
    return out


def _moved_stall(rec: StallRecord, shift: int, pid_map: dict[int, int]) -> StallRecord:
    """A stall record on the job's clock and pids."""
    def t(v: int | None) -> int | None:
        return v + shift if v is not None else None

    return replace(
        rec, seen_ns=rec.seen_ns + shift, since_ns=rec.since_ns + shift, resumed_ns=t(rec.resumed_ns),
        ended_ns=t(rec.ended_ns),
        processes=[replace(p, pid=pid_map.get(p.pid, p.pid), last_progress_ns=p.last_progress_ns + shift)
                   for p in rec.processes],
        stacks=[replace(s, pid=pid_map.get(s.pid, s.pid),
                        ppid=pid_map.get(s.ppid, s.ppid) if s.ppid is not None else None) for s in rec.stacks])


def merge_stalls(stalls: list[tuple[str, StallRecord]]) -> list[StallRecord]:
    """Each node's stalls (``(node, record)``, clocks and pids already the job's) → the job's: records of
    different nodes whose spans overlap are one stall, with every node's processes and stacks. It recovered
    only if every part did; it ended stuck if any part did. Stack paths are prefixed with their node."""
    def span(r: StallRecord) -> tuple[int, int]:
        return r.since_ns, r.resumed_ns or r.ended_ns or r.seen_ns

    groups: list[list[tuple[str, StallRecord]]] = []
    for node, rec in sorted(stalls, key=lambda x: span(x[1])[0]):
        start, _ = span(rec)
        if groups and start <= max(span(r)[1] for _, r in groups[-1]):
            groups[-1].append((node, rec))
        else:
            groups.append([(node, rec)])
    out = []
    for i, group in enumerate(groups, 1):
        recs = [r for _, r in group]
        if len(group) == 1 and len({n for n, _ in stalls}) == 1:
            out.append(replace(recs[0], id=i))
            continue
        resumed = [r.resumed_ns for r in recs]
        ended = [r.ended_ns for r in recs if r.ended_ns is not None]
        out.append(StallRecord(
            id=i, seen_ns=min(r.seen_ns for r in recs), since_ns=min(r.since_ns for r in recs),
            threshold_s=max(r.threshold_s for r in recs), processes=[p for r in recs for p in r.processes],
            stacks=[replace(s, path=f"{node}/{s.path}" if s.path else None) for node, r in group for s in r.stacks],
            resumed_ns=max(x for x in resumed if x is not None) if all(x is not None for x in resumed) else None,
            ended_ns=max(ended) if ended else None,
            action="kill" if any(r.action == "kill" for r in recs) else recs[0].action))
    return out


def _concat(tables: list[Table]) -> Table:
    if not tables:
        return Table()
    if len(tables) == 1:
        return tables[0]
    names = [n for n in tables[0].columns if all(n in t for t in tables)]
    return Table({n: np.concatenate([np.asarray(t[n]) for t in tables]) for n in names})


def _gpu_count(run: Run) -> int:
    known = len((run.meta.get("recorder") or {}).get("gpu") or [])
    seen = int(np.max(run.gpu["gpu"])) + 1 if len(run.gpu) and "gpu" in run.gpu else 0
    return max(known, seen)


def _name(run: Run) -> str:
    return run.path.name if run.path else run.label
