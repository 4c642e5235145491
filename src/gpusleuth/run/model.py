"""The one data model between collection and analysis.

Every source — the recorder's run directory, a PyTorch profiler trace, later an ``nvidia-smi`` log —
becomes a :class:`Run` holding whatever that source had. Analyses read a Run and nothing else, so they
never care where the data came from; that is what keeps the flow one-way
(sources → Run → analysis → diagnosis → Report → renderers).

Tables are columnar (a dict of equal-length numpy arrays), never a Python object per sample or event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpusleuth.run.meta import JsonObject, RunMeta
from gpusleuth.run.mllog import MlLog
from gpusleuth.run.table import Table
from gpusleuth.run.trace_data import TraceData

__all__ = ["ProcessInfo", "Run", "Table"]

if TYPE_CHECKING:
    from gpusleuth.run.stalls import StallRecord
    from gpusleuth.serving.run.engine_samples import EngineSample


@dataclass
class ProcessInfo:
    """One process the job ran, as its instrumentation hook or the recorder saw it."""

    pid: int
    role: str  # "main" (the process with steps), "dataloader_worker", "python", "other"
    ppid: int | None = None
    name: str = ""
    cmdline: str = ""
    torch_version: str | None = None
    # its place in a distributed job (hook header / init_process_group); None where not distributed
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    node_rank: int | None = None
    host: str | None = None
    job_id: str | None = None


@dataclass
class Run:
    """Everything one source knows about one job (or one rank of a job).

    ``meta`` is the JSON metadata (command, hardware, start/end, exit status); each table is optional
    and empty when the source did not have it. ``losses`` says, in plain words, what could not be read
    or was salvaged from a damaged file — reports print it, never hide it.
    """

    meta: RunMeta
    path: Path | None = None
    gpu: Table = field(default_factory=Table)  # NVML samples, one row per (time, device)
    gpu_procs: Table = field(default_factory=Table)  # per-process GPU memory, every few seconds
    host: Table = field(default_factory=Table)  # host samples (CPU, iowait, memory, disk, net, cgroup)
    procs: Table = field(default_factory=Table)  # per-process CPU / RSS samples of the job's tree
    steps: Table = field(default_factory=Table)  # one row per training step
    phases: Table = field(default_factory=Table)  # named phase intervals (eval, checkpoint, logging…)
    comm: Table = field(default_factory=Table)  # one row per collective call (torch.distributed, DDP buckets)
    # Serving (docs/serving.md). ``requests``: one row per request the hook saw *inside the server*
    # (pid, start_ns, end_ns, queue_ns, pre_ns, infer_ns, post_ns, status, kind); ``load``: one row per
    # request ``gpusleuth load`` sent (level, concurrency, rate, start_ns, end_ns, status, error); both
    # on the wall clock (time.time_ns) so they line up with each other and with the samples.
    requests: Table = field(default_factory=Table)
    # ``batches``: the forwards the hook saw outside any request while requests were open (a batcher's
    # model thread or task): pid, start_ns, end_ns, rows, tokens, tid — joined with ``requests`` through
    # their queue hand-off (serving/analysis/batching.py)
    batches: Table = field(default_factory=Table)
    # ``engine``: an LLM engine's own /metrics read while `gpusleuth load` ran (serving/sources/engine_metrics.py
    # EngineSample per scrape: running, waiting, KV usage, preemptions, its TTFT/queue/prefill/decode histograms)
    engine: list[EngineSample] = field(default_factory=list)
    load: Table = field(default_factory=Table)
    logs: list[JsonObject] = field(default_factory=list)  # gpusleuth.log(...) records
    processes: dict[int, ProcessInfo] = field(default_factory=dict)
    infos: list[JsonObject] = field(default_factory=list)  # facts the hook saw (DataLoader config…)
    # this Run's own profiler trace data (run/trace_data.py, built by the Kineto reader), when it came from a
    # trace file
    trace: TraceData | None = None
    profiles: list["Run"] = field(default_factory=list)  # traces taken with --profile-steps, one Run per rank
    # MLPerf ``:::MLLOG`` events from the run's captured output (``run --capture-output``), None without any
    mllog: MlLog | None = None
    # what the recorder's stall watch saw (run/stalls.py): each stall with every process's stacks
    stalls: list[StallRecord] = field(default_factory=list)
    losses: list[str] = field(default_factory=list)

    # --- convenience views -------------------------------------------------------------------
    @property
    def start_ns(self) -> int | None:
        return self.meta.get("start_ns")

    @property
    def end_ns(self) -> int | None:
        return self.meta.get("end_ns")

    @property
    def wall_s(self) -> float | None:
        if self.start_ns is None or self.end_ns is None:
            return None
        return max(0.0, (self.end_ns - self.start_ns) / 1e9)

    @property
    def label(self) -> str:
        return str(self.meta.get("label") or (self.path.name if self.path else "run"))


def pick_main(pids: list[int], counts: list[int], ranks: list[int | None]) -> int | None:
    """The process reported in detail: the lowest rank, else the one with the most steps."""
    if not pids:
        return None
    ranked = [(r, p) for p, r in zip(pids, ranks) if r is not None]
    if ranked:
        return min(ranked)[1]
    return pids[max(range(len(pids)), key=counts.__getitem__)]
