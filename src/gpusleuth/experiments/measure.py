"""What one configuration of a sweep measured, read from its run directory.

Throughput and step times are taken over the *steady state*: warm-up steps (``analysis/steps.warmup_count``,
at least the sweep's ``warmup``: worker start-up, allocator warm-up, cudnn autotuning, the first optimizer
step creating its state) are excluded, because a short bounded run would otherwise be judged on its
start-up. Everything comes from the run's one :class:`~gpusleuth.analysis.bundle.RunAnalysis` (the same
``pipeline/build.analyze_run`` that ``gpusleuth report`` uses) and its diagnosis, so a sweep row and a report
of that run agree. Throughput here is the training loop's (steady steps over their span, phases
included): the quantity every finding's predicted speedup is a ratio of.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict
from pathlib import Path

import numpy as np

from gpusleuth.diagnosis.taxonomy import Severity
from gpusleuth.run.meta import JsonObject
from gpusleuth.run.model import Run
from gpusleuth.run.records import LoaderConfig, loader_config

if TYPE_CHECKING:  # imported where it runs (measure_run), as the analysis is
    from gpusleuth.analysis.bundle import RunAnalysis
    from gpusleuth.analysis.steps import ProcessSteps


class FindingDigest(TypedDict):
    """What the prediction check reads of one finding of a measured run."""

    cause: str
    severity: Severity
    title: str
    speedup: float | None  # the predicted speedup of its fix
    fix: str
    method: str | None  # how the gain was estimated

@dataclass
class Measurement:
    steps: int = 0  # measured steps (after warm-up)
    warmup_steps: int = 0
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    samples_per_step: float | None = None
    step_p50_s: float | None = None
    step_p95_s: float | None = None
    data_wait_share: float | None = None  # exposed data wait ÷ step time, measured steps
    gpu_util_mean: float | None = None
    cpu_cores_busy: float | None = None  # whole host, mean, in cores
    # of the time the training loop was runnable, the share it ran (HostSummary.main_cpu_attained): the host-load
    # band — a prediction is only checked against runs whose loop got the CPU it wanted (predict.py)
    cpu_attained: float | None = None
    main_cpu_pct: float | None = None  # the training process, % of one core
    peak_mem_bytes: float | None = None
    peak_mem_source: str | None = None  # "GPU memory used" | "RSS of the job's processes"
    energy_j_per_1k: float | None = None
    cost_per_1k: float | None = None
    knobs_applied: JsonObject = field(default_factory=dict)  # the hook's records of the knobs it set, merged
    knob_notes: list[str] = field(default_factory=list)
    findings: list[FindingDigest] = field(default_factory=list)  # for the prediction check
    dataloaders: list[LoaderConfig] = field(default_factory=list)
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure_run(run: Run, warmup: int = 2, price_per_hour: float | None = None,
                steps: int | None = None) -> Measurement:
    """``steps``: measure at most this many steady steps, the first ones (a sweep's ``--steps N`` reports N;
    it ran the job a step longer for the one its FLOP counter slows, which is left out)."""
    from gpusleuth.pipeline.build import analyze_run
    from gpusleuth.report.build import report_from

    m = Measurement()
    try:
        a = analyze_run(run, min_warmup=warmup, display=False)
    except Exception as exc:  # noqa: BLE001 - a sweep must survive one configuration's bad run
        m.note = f"analysis failed: {type(exc).__name__}: {exc}"
        return m
    main = a.view.main
    if main is not None and main.count:
        keep = main.steady.copy()
        if steps is not None and keep.sum() > steps:
            keep[np.flatnonzero(keep)[steps:]] = False
        dur = main.seconds[keep]
        start, end = main.table["start_ns"][keep], main.table["end_ns"][keep]
        span = (int(end[-1]) - int(start[0])) / 1e9
        m.warmup_steps = main.warmup
        m.steps = len(dur)
        m.step_p50_s = float(np.percentile(dur, 50))
        m.step_p95_s = float(np.percentile(dur, 95))
        if span > 0:
            m.steps_per_s = m.steps / span
            samples = main.table["samples"][keep]
            if (samples >= 0).all():
                m.samples_per_step = float(samples.mean())
                rates = [_loop_rate(p) for p in a.view.ranks]
                known = [r for r in rates if r is not None]
                m.samples_per_s = float(sum(known)) if len(known) == len(rates) else None
        total = float(dur.sum())
        if total > 0:
            m.data_wait_share = float(main.wait_ns[keep].sum() / 1e9 / total)
        energy = a.headline.energy if a.headline is not None else None
        if energy is not None and energy.per_sample_j is not None:
            m.energy_j_per_1k = energy.per_sample_j * 1000.0
        if price_per_hour is not None and m.samples_per_s:
            m.cost_per_1k = price_per_hour / 3600.0 / m.samples_per_s * 1000.0
    else:
        m.note = "no training steps were recorded (not a PyTorch optimizer loop, or it ended before one step)"
    _knobs(run, m)
    m.dataloaders = [loader_config(i) for i in run.infos if i.get("kind") == "dataloader"]
    _telemetry(a, run, m)
    try:
        findings = report_from(a).findings
    except Exception as exc:  # noqa: BLE001 - the sweep must survive a diagnosis bug
        m.note = (m.note + "; " if m.note else "") + f"diagnosis failed: {type(exc).__name__}: {exc}"
        findings = []
    for f in findings:
        g = f.estimated_gain
        m.findings.append({"cause": f.cause, "severity": f.severity, "title": f.title,
                           "speedup": g.speedup if g else None, "fix": f.fix,
                           "method": g.method if g else None})
    return m


def _loop_rate(p: ProcessSteps) -> float | None:
    """A rank's samples per second of its steady loop (first steady step start → last step end)."""
    keep = p.steady
    samples = p.table["samples"][keep]
    if not keep.any() or not (samples >= 0).all():
        return None
    span = (int(p.table["end_ns"][keep][-1]) - int(p.table["start_ns"][keep][0])) / 1e9
    return float(samples.sum()) / span if span > 0 else None


def _knobs(run: Run, m: Measurement) -> None:
    """Which requested knobs the job really applied — a knob that never reached a DataLoader is said so."""
    requested: JsonObject = {}
    for info in run.infos:
        if info.get("kind") != "knob":
            continue
        ev = info.get("event")
        if ev == "requested":
            requested.update(info.get("knobs") or {})
        elif ev == "applied":
            m.knobs_applied.update(info.get("set") or {})
            for name, why in (info.get("skipped") or {}).items():
                m.knob_notes.append(f"{name} not applied in {info.get('where')}: {why}")
        elif ev == "stopped":
            pass
    for name in requested:
        if name in ("max_steps", "accum") or name in m.knobs_applied:
            continue
        if not any(n.startswith(name + " ") for n in m.knob_notes):
            m.knob_notes.append(f"{name} was requested but the job never applied it (no DataLoader / model call seen)")
    for info in run.infos:
        if info.get("kind") == "hook_error" and str(info.get("where", "")).startswith("knob"):
            m.knob_notes.append(f"knob error in {info.get('where')}: {info.get('error')}")


def _telemetry(a: RunAnalysis, run: Run, m: Measurement) -> None:
    """GPU, CPU and memory columns from the analysis's summaries."""
    utils = [g.util_gpu["mean"] for g in a.gpus if g.util_gpu]
    if utils:
        m.gpu_util_mean = float(np.mean(utils))
    mems = [g.mem_used_max_bytes for g in a.gpus if g.mem_used_max_bytes is not None]
    if mems:
        m.peak_mem_bytes, m.peak_mem_source = float(sum(mems)), "GPU memory used"
    host = a.host
    if host is not None:
        if host.cpu_pct and host.logical_cores:
            m.cpu_cores_busy = host.cpu_pct["mean"] * host.logical_cores / 100.0
        m.main_cpu_pct = getattr(host, "main_cpu_pct_mean", None)
        m.cpu_attained = host.main_cpu_attained
    if m.peak_mem_bytes is None:
        peak = _tree_rss_peak(run)
        if peak is not None:
            m.peak_mem_bytes, m.peak_mem_source = peak, "RSS of the job's processes"


def _tree_rss_peak(run: Run) -> float | None:
    p = run.procs
    if not len(p) or "rss_bytes" not in p:
        return None
    t = np.asarray(p["t_ns"])
    rss = np.nan_to_num(np.asarray(p["rss_bytes"], dtype=np.float64))
    uniq, inv = np.unique(t, return_inverse=True)
    sums = np.bincount(inv, weights=rss, minlength=len(uniq))
    return float(sums.max()) if len(sums) else None


def measure_dir(path: Path, warmup: int = 2, price_per_hour: float | None = None,
                steps: int | None = None) -> Measurement:
    from gpusleuth.sources.inputs import read_inputs

    return measure_run(read_inputs([path]).job, warmup=warmup, price_per_hour=price_per_hour, steps=steps)
