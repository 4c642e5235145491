"""``analyze(run) -> RunAnalysis``: every analysis of one Run, computed once.

Why a bundle: the report, the diagnosis facts, ``compare``, sweep measurements and the live view need
the same numbers (the step view, outcomes, GPU and host summaries, the headline, trace analyses). When
each consumer derived them from the raw Run they disagreed (two warm-ups, three "main process" rules);
now each reads this object, so they agree by construction. It is the serializable boundary between
analysis and diagnosis, as pyinstrument's ``Session`` is between its profiler and its renderers.

A Run may hold a recording (steps, telemetry, ``--profile-steps`` traces), a profiler trace alone (one
per rank, as ``run.trace`` or ``run.profiles``), or GPU telemetry alone; each part here is present when
its data is. ``basis`` is what gains are measured against: the recorded training loop, else the traced
steps — so a trace read on its own gets findings with gains in seconds of its traced steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from gpusleuth.analysis.stalls import StallVerdict, judge_run
from gpusleuth.serving.analysis.capacity import assess_capacity
from gpusleuth.analysis.comm import CommSummary, job_comm
from gpusleuth.analysis.comm import price as price_comm
from gpusleuth.analysis.cost import find_price, price_table
from gpusleuth.analysis.gpu_timeline import GpuTimeline, gpu_timelines
from gpusleuth.analysis.host_ops import HostOps
from gpusleuth.analysis.headline import Headline, compute_headline
from gpusleuth.analysis.identity import RunInfo, run_info
from gpusleuth.serving.analysis.load import LoadAnalysis, analyze_load
from gpusleuth.analysis.loop import LoopFacts, loop_facts
from gpusleuth.analysis.options import AnalysisOptions
from gpusleuth.analysis.outcomes import Outcomes, compute_outcomes, traced_outcomes
from gpusleuth.analysis.job_gpus import JobGpus, job_gpus
from gpusleuth.analysis.peaks import gpu_model
from gpusleuth.analysis.ranks import RankSummary, summarize_rank
from gpusleuth.serving.analysis.requests import RequestAnalysis, analyze_requests, split_by_levels
from gpusleuth.serving.analysis.engine import EngineAnalysis, analyze_engine
from gpusleuth.serving.analysis.slo_miss import explain_misses
from gpusleuth.analysis.steps import StepView, step_view
from gpusleuth.analysis.telemetry import GpuSummary, summarize_gpus
from gpusleuth.analysis.host_telemetry import HostSummary, assign_roles, server_cpu, summarize_host
from gpusleuth.analysis.timeseries import DisplayData, build_display
from gpusleuth.analysis.trace import TraceAnalysis
from gpusleuth.run.model import Run

if TYPE_CHECKING:  # the parsed lines are handed in; analysis reads no file
    from gpusleuth.sources.mllog import MlLog


@dataclass
class RunAnalysis:
    """Everything known about one Run after the analysis. The Run itself is not kept: what a later stage
    needs of it (its identity, the loop's phases and threads, the chart data) is computed here, once."""

    info: RunInfo
    options: AnalysisOptions
    view: StepView
    outcomes: Outcomes | None  # None when nothing was recorded (a trace or a telemetry log read alone)
    basis: Outcomes | None  # what gains are measured against (see the module docstring)
    gpus: list[GpuSummary]
    gpu_note: str | None  # why there is no GPU telemetry, if there is none
    host: HostSummary | None
    gpu_scope: JobGpus | None = None  # which sampled GPUs were the job's (``gpus`` holds those), and how told
    traces: list[TraceAnalysis] = field(default_factory=list)  # one per rank
    host_ops: list[HostOps] = field(default_factory=list)  # per trace with steps, naming its place in ``traces``
    headline: Headline | None = None
    dollars_per_second: float | None = None  # what one second of the job's wall time costs, all devices
    # utilization over time per GPU, for a GPU log read alone (no steps, no traces: nothing better to judge by)
    gpu_timeline: list[GpuTimeline] = field(default_factory=list)
    comm: CommSummary | None = None  # a multi-rank job's collectives matched across ranks
    load: LoadAnalysis | None = None  # `gpusleuth load` levels, the knee, $ per 1M requests (None: no load)
    requests: RequestAnalysis | None = None  # a server's requests, split into queue/pre/infer/post (None: none)
    engine: EngineAnalysis | None = None  # an LLM engine's own /metrics per load level (None: none read)
    losses: list[str] = field(default_factory=list)
    loop: LoopFacts = field(default_factory=LoopFacts)  # phases, loop span, threads, first step (analysis/loop.py)
    display: DisplayData | None = None  # chart data (HTML); None when not asked for
    stalls: list[StallVerdict] = field(default_factory=list)  # the stall watch's stalls, judged (analysis/stalls.py)

    @property
    def recorded(self) -> bool:
        return self.outcomes is not None


def _input_spans(run: Run, trace_run: Run) -> tuple[np.ndarray, np.ndarray] | None:
    """The measured input waits (pre-forward gaps: a loop without a DataLoader) of the steps of the process
    a recording's profiler trace came from — from a step's start (the previous step's end) to its forward."""
    st = run.steps
    if trace_run is run or not len(st) or "wait_source" not in st or trace_run.trace is None:
        return None
    pids = [int(p) for p in trace_run.trace.pids if isinstance(p, (int, np.integer))]
    m = (st["wait_source"] == "pre_forward") & (st["data_wait_ns"] > 0) & np.isin(st["pid"], pids)
    if not m.any():
        return None
    starts = st["start_ns"][m].astype(np.int64)
    return starts, starts + st["data_wait_ns"][m].astype(np.int64)


def trace_runs(run: Run) -> list[Run]:
    """The Runs holding profiler traces: the run itself (a trace read alone) and its profiles."""
    return ([run] if run.trace is not None else []) + list(run.profiles)


def analyze(run: Run, options: AnalysisOptions | None = None, *, prices: dict[str, float] | None = None,
            mllog: MlLog | None = None, min_warmup: int = 0, progress: Callable[[int, int], None] | None = None,
            ranks: list[RankSummary] | None = None, display: bool = True) -> RunAnalysis:
    """Analyse ``run`` once. ``prices``/``mllog``: what ``sources`` read from the user's files;
    ``min_warmup``: leading steps a sweep excludes at least; ``progress(done, total)`` per trace.
    ``ranks``: the trace runs' ``summarize_rank`` results when they were computed elsewhere (worker
    processes: ``pipeline/trace_set.py``), one per ``trace_runs(run)`` in order; else computed here.
    ``display``: also build the chart data (``RunAnalysis.display``, for the HTML report)."""
    options = options or AnalysisOptions()
    # a recording by `gpusleuth run` (steps, phases, host and GPU samples over its window); not a trace set
    # nor another tool's log (nvidia-smi, DCGM, nsys — `source` names it): those have no steps to account for
    recorded = (run.trace is None and run.start_ns is not None and run.end_ns is not None
                and run.meta.get("source", "recorder") == "recorder")
    view = step_view(run, min_warmup) if recorded else StepView()
    outcomes = compute_outcomes(run, view) if recorded else None
    rec = run.meta.get("recorder") or {}
    sampled = summarize_gpus(run, view.window if recorded else None)
    gpu_scope = job_gpus(run, rec.get("gpu") or [], [g.index for g in sampled]) if sampled else None
    # energy, cost, MFU and the per-GPU rules are the job's: GPUs it never touched are left out
    gpus = [g for g in sampled if gpu_scope is None or g.index in gpu_scope.indices]
    gpu_note = None if gpus else (rec.get("gpu_note") or ("a profiler trace has no GPU telemetry"
                                                           if not recorded else "no GPU telemetry in this run"))
    roles = assign_roles(run, view.pid) if run.trace is None else {}  # each process's role, once
    host = summarize_host(run, view.pid, roles, view.window) if recorded else None
    losses = list(run.losses)
    sources = trace_runs(run)
    if ranks is not None and len(ranks) != len(sources):
        raise ValueError(f"{len(ranks)} rank summaries for {len(sources)} traces")
    traces, host_ops = [], []
    for i, tr in enumerate(sources):
        rank = ranks[i] if ranks is not None else summarize_rank(tr, _input_spans(run, tr))
        traces.append(rank.trace)
        if tr is not run:
            # a reader's loss already names its file ("x.sqlite: …"); say the file once
            losses.extend(msg if msg.startswith(f"{tr.label}:") else f"{tr.label}: {msg}" for msg in tr.losses)
        if rank.host_ops is not None:  # named by place in ``traces``: labels repeat across single-rank jobs
            host_ops.append(replace(rank.host_ops, trace=i))
        if progress is not None and ranks is None:
            progress(i + 1, len(sources))
    headline = (compute_headline(run, view, outcomes, gpus, options, prices, mllog, job_gemm_dtype(traces))
                if outcomes is not None else None)
    basis = outcomes if outcomes is not None and outcomes.steps.steps else (traced_outcomes(traces) or outcomes)
    devices = [g.name for g in gpus] or [t.device for t in traces if t.device_span_s > 0]
    per_second: float | None
    gpu_hour: float | None
    if headline is not None and headline.cost is not None:
        per_second = headline.cost.per_recoverable_second
        gpu_hour = headline.cost.price.per_gpu_hour
    else:
        per_second = _price_per_second(devices, options, prices)
        gpu_hour = per_second * 3600.0 / len(devices) if per_second is not None and devices else None
    comm = job_comm(run, traces)
    if comm is not None and not devices:
        # CPU ranks: a rank-hour is a process-hour, priced at its share of the machines the ranks ran on
        comm.hours_unit = "process-hours"
        gpu_hour = per_second * 3600.0 / len(comm.ranks) if per_second is not None else None
    price_comm(comm, gpu_hour)  # what the job's collectives and waiting cost, one GPU per rank
    load = analyze_load(run, _load_price(per_second, options), gpu_note)
    _not_foreign(host, load, run)
    requests = analyze_requests(run)
    _server_host(host, load, run)
    if requests is not None and load is not None:  # `gpusleuth load` levels: the server's split per level
        try:
            requests.levels = split_by_levels(requests, run, load.levels)
            requests.misses = explain_misses(run, load, requests)
            requests.capacity = assess_capacity(load, requests)
        except Exception as exc:  # noqa: BLE001 - the client's table needs nothing from the server's side
            requests.levels, requests.misses, requests.capacity = [], [], None
            losses.append(f"the server's requests could not be split by load level ({exc.__class__.__name__}: "
                          f"{str(exc)[:120]}): the levels' server-side numbers are not attributed; the client's "
                          "per-level table stands")
    if requests is not None and requests.note:  # requests the batcher's forwards could not be tied to
        losses.append(requests.note)
    loop = loop_facts(run, view, host, basis.steps.steps if basis else 0,
                      basis.steps.step_time_s if basis else None, recorded)
    charts = None
    if display:
        charts = build_display(run if run.trace is None and run.start_ns is not None else None, traces, view, roles)
    return RunAnalysis(info=run_info(run, recorded), options=options, view=view, outcomes=outcomes, basis=basis, gpus=gpus,
                       gpu_note=gpu_note, host=host, gpu_scope=gpu_scope, traces=traces, host_ops=host_ops,
                       headline=headline, dollars_per_second=per_second, losses=losses,
                       gpu_timeline=gpu_timelines(run) if gpus and view.main is None and not traces else [],
                       comm=comm, load=load, requests=requests, loop=loop, display=charts,
                       engine=analyze_engine(run, load), stalls=judge_run(run))


def job_gemm_dtype(traces: list[TraceAnalysis]) -> str | None:
    """The precision most of the job's GEMM kernel time ran in, over its ranks' traces (None without GEMMs)."""
    total: dict[str, float] = {}
    for t in traces:
        for prec, s in t.kernels.precision_s.items():
            total[prec] = total.get(prec, 0.0) + s
    return max(total, key=lambda k: total[k]) if total else None


def _not_foreign(host: HostSummary | None, load: LoadAnalysis | None, run: Run) -> None:
    """``gpusleuth load`` runs beside the server it drives: its own CPU is not someone else's load on the
    host, so it leaves the foreign cores (spread over the whole run, as the host figure is for a server)."""
    if host is None or load is None or host.foreign_cores_steps is None or not run.wall_s:
        return
    gen = sum((lv.generator_cpu_cores or 0.0) * max(lv.end_ns - lv.start_ns, 0) / 1e9 for lv in load.levels)
    host.foreign_cores_steps = max(host.foreign_cores_steps - gen / run.wall_s, 0.0)


def _server_host(host: HostSummary | None, load: LoadAnalysis | None, run: Run) -> None:
    """A server's CPU on the Host line is the whole server's: every process of its tree while it served (the load
    levels, else its requests), not its main process — the launcher, for LitServe or Ray."""
    if host is None:
        return
    window: tuple[int, int] | None = None
    if load is not None and load.levels:
        window = (min(int(lv.start_ns) for lv in load.levels), max(int(lv.end_ns) for lv in load.levels))
    elif len(run.requests) and "start_ns" in run.requests:
        window = (int(np.min(run.requests["start_ns"])), int(np.max(run.requests["end_ns"])))
    got = server_cpu(run, window) if window is not None else None
    if got is not None:
        host.server_cores, host.server_processes = got


def _load_price(per_second: float | None, options: AnalysisOptions) -> float | None:
    """A server with no GPU recorded (CPU, or loaded from afar) is priced at the user's price per hour."""
    if per_second is None and options.price_per_gpu_hour:
        return options.price_per_gpu_hour / 3600.0
    return per_second


def _price_per_second(devices: list[str | None], options: AnalysisOptions,
                      prices: dict[str, float] | None) -> float | None:
    """What a second of the devices seen (a GPU log's GPUs, a trace set's one device per rank) costs: the
    user's price per GPU-hour, else the dated table by device name."""
    if not devices:
        return None
    price = find_price(gpu_model(devices[0]) or devices[0], options.price_per_gpu_hour, price_table(prices))
    return price.per_gpu_hour * len(devices) / 3600.0 if price else None


__all__ = ["RunAnalysis", "analyze", "trace_runs"]
