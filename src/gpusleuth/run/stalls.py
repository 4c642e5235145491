"""What the recorder's stall watch saw while the job was stuck, as the Run carries it: each stall's processes
(rank, steps, last progress) and every process's Python stacks, thread by thread, innermost frame first.

Written by ``recorder/stallwatch.py`` (``stalls/stalls.jsonl`` and ``stalls/<id>/stacks-<pid>.txt``), read by
``sources/stalls.py``, judged by ``analysis/stalls.py``. Strings here (file names, function names, thread names)
come from the job: untrusted wherever they are shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int | None


@dataclass
class ThreadStack:
    name: str  # py-spy's thread name ("MainThread"); faulthandler's "Thread 0x…" / "Current thread 0x…"
    frames: list[Frame]  # innermost first
    main: bool = False  # the process's main thread (py-spy names it; faulthandler lists it last)


@dataclass
class ProcessStacks:
    pid: int
    via: str  # "py-spy" or "faulthandler"
    threads: list[ThreadStack] = field(default_factory=list)
    path: str | None = None  # the stack file, relative to the run directory
    error: str | None = None  # why no stack was taken (py-spy failed and no signal handler, the process gone…)
    ppid: int | None = None  # its parent when the stack was taken (a DataLoader worker's is its rank)
    role: str | None = None  # the hook's role for it ("main", "dataloader_worker", "python"…)


@dataclass
class StalledProcess:
    pid: int
    rank: int | None
    role: str
    steps: int  # steps it had recorded when the stall was seen
    last_progress_ns: int  # its last step end or phase boundary seen
    stalled: bool  # past its threshold when the stall was seen (False: still progressing, or not a stepper)
    step_s: float | None = None  # its recent median step time


@dataclass(frozen=True)
class FlightEntry:
    """One collective in torch's Flight Recorder ring (``collective_seq_id``: the group's running count)."""

    group: str  # the process group's id ("0": the default group)
    seq: int  # its collective sequence number (p2p ops: their own count, ``p2p`` True)
    op: str  # "all_reduce", "broadcast"… (torch's profiling name without the backend prefix)
    state: str | None  # "scheduled" / "started" / "completed" (gloo leaves its entries "scheduled")
    p2p: bool = False


@dataclass
class FlightRing:
    """One process's Flight Recorder ring as it was at the stall (``gpusleuth run`` asked the hook for it)."""

    pid: int
    path: str | None = None  # the saved snapshot, relative to the run directory
    error: str | None = None
    entries: list[FlightEntry] = field(default_factory=list)
    # per process group: (last collective enqueued — entered — by this process, last completed); None: unknown
    groups: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)


@dataclass
class StallRecord:
    """One stall: seen at ``seen_ns``; ``resumed_ns`` when progress came back (recovered), else None (the job
    ended, or was ended by ``--on-stall kill``, still stuck: ``ended_ns``)."""

    id: int
    seen_ns: int
    since_ns: int  # the earliest last progress of the stalled processes: when the job stopped
    threshold_s: float
    processes: list[StalledProcess]
    stacks: list[ProcessStacks] = field(default_factory=list)
    resumed_ns: int | None = None
    ended_ns: int | None = None
    action: str = "dump"  # what --on-stall did: "dump" (kept going) or "kill"
    flight: list[FlightRing] = field(default_factory=list)  # torch's Flight Recorder, where the job kept one
