"""Parse the instrumentation hook's event stream (``raw/events-<pid>.tsv``) into Run tables.

The format is specified in docs/run-format.md. Parsing is tolerant by design: a job killed mid-write can
leave a partial last line, and a line we cannot read must never cost the user the rest of the file —
each bad line is skipped and counted, and the count is reported as a loss.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpusleuth.run.layout import RunDir
from gpusleuth.run.meta import JsonObject
from gpusleuth.run.model import ProcessInfo, Table
from gpusleuth.serving.run.request_ids import clean_request_id

DELIMITERS = ("optimizer", "backward", "explicit", "skipped")  # skipped: a GradScaler skipped the update
_DELIM_CODE = {"o": "optimizer", "b": "backward", "e": "explicit"}


@dataclass
class ParsedEvents:
    steps: Table = field(default_factory=Table)
    phases: Table = field(default_factory=Table)
    comm: Table = field(default_factory=Table)
    requests: Table = field(default_factory=Table)
    batches: Table = field(default_factory=Table)
    logs: list[JsonObject] = field(default_factory=list)
    infos: list[JsonObject] = field(default_factory=list)
    processes: dict[int, ProcessInfo] = field(default_factory=dict)
    # pid → when its hook made its last write at exit (an ``X`` line): nothing of that process is missing
    exited: dict[int, int] = field(default_factory=dict)
    losses: list[str] = field(default_factory=list)


def parse_event_files(run_dir: Path, end_ns: int | None, live: bool = False) -> ParsedEvents:
    """Read every ``raw/events-*.tsv`` of a run. ``end_ns`` closes phases the job never ended. ``live``:
    the job is still writing, so a last line without its newline is one being written, not damage."""
    out = ParsedEvents()
    step_rows: list[tuple[Any, ...]] = []
    phase_rows: list[tuple[Any, ...]] = []
    comm_rows: list[tuple[Any, ...]] = []
    request_rows: list[tuple[Any, ...]] = []
    batch_rows: list[tuple[Any, ...]] = []
    gpu_times: dict[tuple[int, int], int] = {}
    files = RunDir(run_dir).event_files()
    for path in files:
        try:
            pid = int(path.stem.split("-", 1)[1])
        except (IndexError, ValueError):
            out.losses.append(f"{path.name}: not named events-<pid>.tsv; skipped")
            continue
        bad = _parse_one(path, pid, out, step_rows, phase_rows, gpu_times, end_ns, live, comm_rows, request_rows,
                         batch_rows)
        if bad:
            out.losses.append(f"{path.name}: {bad} unreadable line(s) skipped (a partial write when the job died?)")

    if step_rows:
        cols = list(zip(*step_rows))
        pids = np.asarray(cols[0], dtype=np.int64)
        starts = np.asarray(cols[1], dtype=np.int64)
        order = np.lexsort((starts, pids))
        per_pid_index = np.zeros(len(step_rows), dtype=np.int64)
        sorted_pids = pids[order]
        # index of each step within its own process, in time order
        boundaries = np.r_[0, np.flatnonzero(np.diff(sorted_pids)) + 1]
        idx = np.arange(len(order)) - np.repeat(boundaries, np.diff(np.r_[boundaries, len(order)]))
        per_pid_index[order] = idx
        gpu_ns = np.array(
            [gpu_times.get((int(p), int(i)), -1) for p, i in zip(pids, per_pid_index)], dtype=np.int64
        )
        fetches = np.asarray(cols[7], dtype=np.int64)
        delims = np.asarray(cols[8], dtype=object)
        pre_forward, fwd_samples, fwd_new = (np.asarray(cols[i], dtype=np.int64) for i in (9, 10, 12))
        wait, samples, source = input_wait(
            fetches, np.asarray(cols[3], dtype=np.int64), np.asarray(cols[5], dtype=np.int64),
            pre_forward, fwd_samples, fwd_new, delims == "backward")
        table = Table(
            {
                "step": per_pid_index,
                "pid": pids,
                "start_ns": starts,
                "end_ns": np.asarray(cols[2], dtype=np.int64),
                "data_wait_ns": wait,
                "data_cpu_ns": np.asarray(cols[4], dtype=np.int64),
                "samples": samples,
                "optimizer_ns": np.asarray(cols[6], dtype=np.int64),
                "fetches": fetches,
                "delimiter": delims,
                "gpu_ns": gpu_ns,
                "pre_forward_ns": np.asarray(cols[9], dtype=np.int64),
                "tokens": np.asarray(cols[11], dtype=np.int64),
                "wait_source": source,
            }
        )
        out.steps = table.sort_by("start_ns")
    if phase_rows:
        cols = list(zip(*phase_rows))
        out.phases = Table(
            {
                "name": np.asarray(cols[0], dtype=object),
                "pid": np.asarray(cols[1], dtype=np.int64),
                "start_ns": np.asarray(cols[2], dtype=np.int64),
                "end_ns": np.asarray(cols[3], dtype=np.int64),
                "source": np.asarray(cols[4], dtype=object),
            }
        ).sort_by("start_ns")
    if comm_rows:
        out.comm = comm_table(comm_rows)
    if request_rows:
        out.requests = request_table(request_rows)
    if batch_rows:
        out.batches = batch_table(batch_rows)
    _dist_identity(out)
    out.logs.sort(key=lambda r: r.get("t_ns", 0))
    return out


def step_fields(parts: list[str]) -> tuple[int, int, int, int, int, int, int, str]:
    """An ``S`` line split on tabs → (start_ns, end_ns, data_wait_ns, data_cpu_ns, samples, optimizer_ns,
    fetches, delimiter); raises IndexError/ValueError on a damaged line. The one reader of the step format
    (the report's loader and the live view both call it)."""
    return (int(parts[1]), int(parts[2]), int(parts[3]), int(parts[4]), int(parts[5]), int(parts[6]),
            int(parts[7]), _DELIM_CODE.get(parts[8], parts[8]))


def forward_fields(parts: list[str]) -> tuple[int, int, int, int]:
    """The optional tail of an ``S`` line (hooks since issue 12): (pre_forward_ns, forward samples, forward
    tokens, forward input new: 1/0); all -1 when an older hook wrote the line."""
    if len(parts) < 13:
        return -1, -1, -1, -1
    return int(parts[9]), int(parts[10]), int(parts[11]), int(parts[12])


def input_wait(fetches: np.ndarray, loader_wait: np.ndarray, samples: np.ndarray, pre_forward: np.ndarray,
               fwd_samples: np.ndarray, fwd_new: np.ndarray, by_backward: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each step's input wait, samples and where the wait was measured (docs/run-format.md):

    * ``loader`` — the step fetched from a DataLoader (or ``gpusleuth.watch``): the fetch time;
    * ``pre_forward`` — no fetch, and the first forward's input was a new tensor (or not a positional
      tensor at all, e.g. ``model(**batch)``): the time from the previous step's end to that forward
      (``get_batch``, memmap reads, a custom sampler) is input wait;
    * ``host`` — no fetch, and the forward reused the previous step's tensor, or the step ended at
      ``backward()`` (no optimizer: the hand-written parameter update runs in the gap, as in
      word_language_model): that gap is other host work, not input, so the input wait is 0;
    * ``in_model`` — no fetch, and the first module call's input already carried autograd history (forward
      input flag 2): the model's forward began before any module was called (``model.forward(x)`` called
      directly, functional layers first), so the gap holds the model's own work and the input wait is not
      known: -1;
    * ``unmeasured`` — no fetch and no forward seen (the first step, a job without nn.Modules): -1, which
      reports show as unmeasured, never as 0.

    Samples come from the batch the loader returned, else from the first forward's input.
    """
    none = fetches <= 0
    seen = pre_forward >= 0
    inside = fwd_new == 2
    fresh = (fwd_new != 0) & ~inside & ~by_backward
    source = np.where(~none, "loader", np.where(~seen, "unmeasured", np.where(
        inside, "in_model", np.where(fresh, "pre_forward", "host")))).astype(object)
    wait = np.where(~none, loader_wait, np.where(~seen | inside, -1, np.where(fresh, pre_forward, 0)))
    samples = np.where((samples < 0) & (fwd_samples >= 0), fwd_samples, samples)
    return wait.astype(np.int64), samples.astype(np.int64), source



COMM_COLUMNS = ("pid", "start_ns", "end_ns", "op", "bytes", "group", "seq", "device_ns")


def comm_table(rows: list[tuple[Any, ...]]) -> Table:
    """``C`` rows (pid first) → the ``comm`` table, in time order."""
    cols = list(zip(*rows))
    kinds = (np.int64, np.int64, np.int64, object, np.int64, object, np.int64, np.int64)
    return Table({name: np.asarray(col, dtype=kind) for name, col, kind in zip(COMM_COLUMNS, cols, kinds)}
                 ).sort_by("start_ns")


REQUEST_COLUMNS = ("pid", "start_ns", "end_ns", "queue_ns", "pre_ns", "infer_ns", "post_ns", "status", "kind",
                   "forwards", "batch", "stages", "handoff_ns", "claimed_ns", "delivered_ns", "request_id",
                   "first_forward_ns", "received_ns", "gets", "follow_key")
BATCH_COLUMNS = ("pid", "start_ns", "end_ns", "rows", "tokens", "tid", "keys")
REQUEST_KINDS = ("http.server", "wsgi", "asgi", "ray")
STAGE_NAME_MAX = 64


def request_fields(parts: list[str]) -> tuple[Any, ...]:
    """An ``R`` line split on tabs → its row (without the pid); raises IndexError/ValueError on a damaged
    line. ``stages`` comes back as compact JSON text of {clean name: ns}, names cut to 64 characters."""
    nums = tuple(int(parts[i]) for i in range(1, 8))
    start, end, queue, pre, infer, post, status = nums
    if not (0 < start <= end < 2**63) or infer < 0 or queue < -1 or pre < -1 or post < -1:
        raise ValueError("request times out of range")
    kind = parts[8] if parts[8] in REQUEST_KINDS else "other"
    forwards, batch = int(parts[9]), int(parts[10])
    if not all(-2**31 < v < 2**31 for v in (status, forwards, batch)):
        raise ValueError("request counts out of range")
    stages = json.loads(parts[11]) if len(parts) > 11 else {}
    if not isinstance(stages, dict):
        raise ValueError("stages is not an object")
    clean = {}
    for name, ns in stages.items():
        if isinstance(ns, bool) or not isinstance(ns, int) or not 0 <= ns < 2**63:
            raise ValueError("stage time out of range")
        clean["".join(ch if ch.isprintable() else " " for ch in str(name))[:STAGE_NAME_MAX]] = ns
    # the queue hand-off (docs/serving.md, "Batching servers"): -1 when none, or a line from before it existed
    # the first forward's wall ns (a generation's prefill), the request's last get from a queue (a streaming
    # handler's last token) and how many it made
    handoff = tuple(int(parts[i]) if len(parts) > i else -1 for i in (12, 13, 14))
    later = tuple(int(parts[i]) if len(parts) > i else -1 for i in (16, 17, 18))
    if not all(-1 <= v < 2**63 for v in handoff + later):
        raise ValueError("hand-off times out of range")
    # the client's X-Request-Id as text, whatever it sent (serving/run/request_ids.py: bounded, printable); "" none
    rid = clean_request_id(parts[15]) if len(parts) > 15 else ""
    # what the request's work was followed by into another process or a framework's batch ("": nothing handed
    # off, or a line from before; "?": handed to another process with no id in it), serving/analysis/follow.py
    key = follow_key(parts[19]) if len(parts) > 19 else ""
    return (start, end, queue, pre, infer, post, status, kind, forwards, batch,
            json.dumps(clean, separators=(",", ":"), ensure_ascii=False), *handoff, rid, *later, key)


def request_table(rows: list[tuple[Any, ...]]) -> Table:
    """``R`` rows (pid first) → the ``requests`` table, in time order; ``stages`` is JSON text per row."""
    cols = list(zip(*rows))
    kinds = (np.int64,) * 8 + (object, np.int64, np.int64, object) + (np.int64,) * 3 + (object,) + (np.int64,) * 3 + \
        (object,)
    return Table({name: np.asarray(col, dtype=kind) for name, col, kind in zip(REQUEST_COLUMNS, cols, kinds)}
                 ).sort_by("start_ns")


def batch_fields(parts: list[str]) -> tuple[int, int, int, int, int, str]:
    """An ``F`` line (a forward outside any request: a batcher's) → (start_ns, end_ns, rows, tokens, tid, keys);
    ``keys``: the requests it ran for where the hook knew them (``key/taken,…``, serving/analysis/follow.py), else ""."""
    start, end, rows, tokens, tid = (int(parts[i]) for i in range(1, 6))
    if not (0 < start <= end < 2**63) or not all(-2 < v < 2**62 for v in (rows, tokens)) or not 0 <= tid < 2**63:
        raise ValueError("forward out of range")
    keys = parts[6].strip() if len(parts) > 6 else ""
    keys = "" if keys == "-" else "".join(ch if ch.isprintable() else "_" for ch in keys[:65536])
    return start, end, rows, tokens, tid, keys


def follow_key(text: str) -> str:
    text = text.strip()
    return "" if text in ("", "-") else "".join(ch if ch.isprintable() else "_" for ch in text[:128])


def batch_table(rows: list[tuple[Any, ...]]) -> Table:
    """``F`` rows (pid first) → the ``batches`` table, in time order."""
    cols = list(zip(*rows))
    return Table({name: np.asarray(col, dtype=object if name == "keys" else np.int64)
                  for name, col in zip(BATCH_COLUMNS, cols)}).sort_by("start_ns")


def _dist_identity(out: ParsedEvents) -> None:
    """What ``init_process_group`` said beats the environment (``mp.spawn`` sets no RANK variable)."""
    for info in out.infos:
        pid = info.get("pid")
        proc = out.processes.get(pid) if isinstance(pid, int) else None
        if info.get("kind") != "dist_init" or proc is None:
            continue
        for name in ("rank", "world_size", "local_rank", "node_rank", "host"):
            if info.get(name) is not None:
                setattr(proc, name, info[name])


def _parse_one(path: Path, pid: int, out: ParsedEvents, step_rows: list[tuple[Any, ...]],
               phase_rows: list[tuple[Any, ...]], gpu_times: dict[tuple[int, int], int], end_ns: int | None,
               live: bool, comm_rows: list[tuple[Any, ...]], request_rows: list[tuple[Any, ...]],
               batch_rows: list[tuple[Any, ...]]) -> int:
    bad = 0
    open_phases: dict[tuple[str, int], str] = {}
    from gpusleuth.errors import InputError
    from gpusleuth.run.files import open_regular

    try:
        with open_regular(path, "an event file", "r", encoding="utf-8", errors="replace") as f:
            data = f.read()
    except (OSError, InputError) as exc:
        out.losses.append(f"{path.name}: unreadable ({getattr(exc, 'problem', None) or getattr(exc, 'strerror', None) or exc}); "
                          "its steps are missing")
        return 0
    lines = data.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif lines:
        lines.pop()  # the last line has no newline: it was cut off mid-write (or is being written)
        bad += not live
    for line in lines:
        parts = line.split("\t")
        kind = parts[0]
        try:
            if kind == "S":
                row = (pid, *step_fields(parts)) + forward_fields(parts)
                if not all(-2**63 < v < 2**63 for v in row[1:8]):  # damage: would overflow int64 columns
                    raise ValueError(line)
                step_rows.append(row)
            elif kind == "C":
                comm_rows.append((pid, int(parts[1]), int(parts[2]), parts[3], int(parts[4]), parts[5],
                                  int(parts[6]), int(parts[7])))
            elif kind == "R":
                request_rows.append((pid, *request_fields(parts)))
            elif kind == "F":
                batch_rows.append((pid, *batch_fields(parts)))
            elif kind == "G":
                gpu_times[(pid, int(parts[1]))] = int(parts[2])
            elif kind == "X":
                out.exited[pid] = int(parts[1])
            elif kind == "B":
                open_phases[(parts[1], int(parts[2]))] = parts[3]
            elif kind == "P":
                name, start = parts[1], int(parts[2])
                open_phases.pop((name, start), None)
                phase_rows.append((name, pid, start, int(parts[3]), parts[4]))
            elif kind == "L":
                rec = json.loads(parts[2])
                rec["t_ns"] = int(parts[1])
                rec["pid"] = pid
                out.logs.append(rec)
            elif kind == "I":
                rec = json.loads(parts[2])
                rec["t_ns"] = int(parts[1])
                rec["pid"] = pid
                out.infos.append(rec)
            elif kind == "H":
                h = json.loads(parts[1])
                out.processes[pid] = ProcessInfo(
                    pid=pid,
                    role=str(h.get("role") or "python"),
                    ppid=h.get("ppid"),
                    name=str(h.get("name") or ""),
                    cmdline=" ".join(map(str, h.get("argv") or [])),
                    torch_version=h.get("torch"),
                    rank=int_or_none(h.get("rank")),
                    local_rank=int_or_none(h.get("local_rank")),
                    world_size=int_or_none(h.get("world_size")),
                    node_rank=int_or_none(h.get("node_rank")),
                    host=str(h["host"]) if h.get("host") else None,
                    job_id=str(h["job_id"]) if h.get("job_id") else None,
                )
            else:
                bad += 1
        except (IndexError, ValueError, TypeError, AttributeError, RecursionError):
            bad += 1  # a cut-off, damaged or hand-edited line (JSON of the wrong shape included)
    for (name, start), source in open_phases.items():
        # The job died inside this phase: it lasted at least until the end of the run.
        stop = end_ns if end_ns is not None else start
        phase_rows.append((name, pid, start, max(start, stop), "open"))
    return bad


def int_or_none(v: Any) -> int | None:
    """A rank field from the header: the environment's text, or anything a damaged file holds."""
    try:
        return int(v) if v is not None and str(v).strip() != "" else None
    except (TypeError, ValueError):
        return None
