"""Compare runs of the same job: outcomes side by side, deltas against the first (baseline) run with a
noise band, scaling efficiency when the runs used different numbers of processes/GPUs, and CI gates.

Noise band: analysis/noise.py, shared with sweep — a change is only called a change when it exceeds two
standard errors of the two runs' median step times combined *and* the run-to-run floor of identical runs
(one run per side cannot measure run-to-run noise, so the band is never below that floor). Gates
(``--fail-if 'throughput<-5%'``) compare the raw numbers — they are the user's contract — and the report
says next to each whether the change is beyond the noise.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field
from typing import TypedDict


from gpusleuth.analysis.bundle import RunAnalysis
from gpusleuth.analysis.noise import band_statement, load_band, load_statement, single_run_band, step_se_rel
from gpusleuth.errors import GpusleuthError

# metric id → (label, higher is better)
METRICS: dict[str, tuple[str, bool]] = {
    "throughput": ("samples/s (steady)", True),
    "tokens_per_s": ("tokens/s (steady)", True),
    "step_time": ("step time p50", False),
    "step_time_p95": ("step time p95", False),
    "goodput": ("goodput", True),
    "data_wait": ("exposed data wait (share of steps)", False),
    "mfu": ("MFU", True),
    "energy_per_sample": ("energy per sample (J)", False),
    "cost_per_1k": ("cost per 1k samples ($)", False),
    "wall": ("wall time (s)", False),
}
_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_GATE = re.compile(r"^\s*([a-z_0-9]+)\s*(<=|>=|<|>)\s*([-+]?[0-9.]+(?:[eE][-+]?\d+)?)\s*(%?)\s*$")


class GateError(GpusleuthError):
    pass


@dataclass
class Gate:
    metric: str
    op: str
    value: float
    relative: bool
    text: str

    @classmethod
    def parse(cls, text: str) -> "Gate":
        m = _GATE.match(text)
        if not m or m.group(1) not in METRICS:
            raise GateError(
                f"--fail-if {text!r}: want METRIC OP VALUE[%], e.g. 'throughput<-5%' (relative to the baseline) "
                f"or 'goodput<0.8' (absolute); metrics: {', '.join(METRICS)}"
            )
        return cls(metric=m.group(1), op=m.group(2), value=float(m.group(3)), relative=m.group(4) == "%", text=text)


@dataclass
class RunColumn:
    label: str
    path: str | None
    processes: int  # processes with training steps (ranks) — or GPUs used, whichever is larger
    samples_per_step: float | None
    metrics: dict[str, float | None]
    step_se_rel: float | None  # relative standard error of the median step time
    # what one second of the run costs, all its GPUs (or its machines on CPU); None: not priced
    dollars_per_second: float | None = None
    # cores other processes used while its steps ran, when they crowded a busy host (a shared machine)
    crowded_cores: float | None = None
    cores: int | None = None
    # of the time its training loop was runnable, the share it got a CPU (HostSummary.main_cpu_attained)
    cpu_attained: float | None = None


@dataclass
class GateResult:
    gate: str
    run: str
    value: float | None
    failed: bool
    beyond_noise: bool | None
    detail: str
    unavailable: bool = False  # the run lacks the metric: the gate cannot be checked, which fails it


class ScalingCost(TypedDict):
    """What the larger size buys and what it costs, per unit of work (:func:`scaling_cost`)."""

    speedup: float  # throughput ratio
    cost_change: float  # relative change of the cost per sample
    time_change: float  # relative change of the time per sample
    per_1k: list[float]  # the cost per 1k samples at each size, in ``per_1k_unit``
    per_1k_unit: str  # "$ per 1k samples" or "process-seconds per 1k samples"
    verdict: str
    cost_outpaces_time: bool


# One size against the baseline's: the scaling efficiency and its cost (``compare --json``'s ``scaling``). Written
# this way because one key is ``from``, a Python keyword.
Scaling = TypedDict("Scaling", {
    "run": str, "from": int, "to": int,  # the run, and the processes (GPUs) of the baseline and of this run
    "efficiency": float, "regime": str, "formula": str,
    "speedup": float, "cost_change": float, "time_change": float, "per_1k": list[float], "per_1k_unit": str,
    "verdict": str, "cost_outpaces_time": bool,
})


@dataclass
class Comparison:
    runs: list[RunColumn]
    deltas: list[dict[str, float | None]]  # per run: relative change vs baseline per metric
    beyond_noise: list[dict[str, bool | None]]
    noise_band: list[float]  # per run: ± relative change resolvable vs baseline (analysis/noise.py)
    scaling: list[Scaling] = field(default_factory=list)
    gates: list[GateResult] = field(default_factory=list)
    noise_notes: list[str | None] = field(default_factory=list)  # per run: what one run per side can resolve

    @property
    def failed(self) -> bool:
        return any(g.failed for g in self.gates)


def column_for(a: RunAnalysis) -> RunColumn:
    """The numbers of one run, from its :class:`~gpusleuth.analysis.bundle.RunAnalysis` (steady steps of the
    step view for the within-run noise; throughput is the job's, every rank's samples)."""
    h = a.headline
    o = a.outcomes
    # a profiler trace read alone (no recording): its traced steps are its steps (their marks: ProfilerStep#
    # or an NVTX step range); a trace window without step marks is no step
    traced = a.basis if o is None and a.basis is not None and a.basis.steps.delimiter != "trace window" else None
    main = a.view.main
    se_rel = step_se_rel(main.seconds[main.steady]) if main is not None else None
    processes = max(a.view.world_size if main is not None else 1, h.gpus_used if h else 0, 1)
    sps = None
    if o is not None and o.steps.steps and o.steps.samples:
        sps = o.steps.samples / o.steps.steps
    m = {
        "throughput": h.steady.samples_per_s if h else None,
        "tokens_per_s": h.steady.tokens_per_s if h else None,
        "step_time": h.steady.step_time_p50_s if h else traced.steps.step_time_p50_s if traced else None,
        "step_time_p95": h.steady.step_time_p95_s if h else traced.steps.step_time_p95_s if traced else None,
        "goodput": h.goodput.goodput if h else None,
        "data_wait": (o.steps.data_wait_share_of_steps if o is not None and o.steps.steps
                      and o.steps.data_wait_measured_steps != 0 else None),
        "mfu": h.mfu.mfu if h else None,
        "energy_per_sample": h.energy.per_sample_j if h and h.energy else None,
        "cost_per_1k": h.cost.per_1k_samples if h and h.cost else None,
        "wall": o.wall_s if o is not None else None,
    }
    return RunColumn(label=a.info.label, path=a.info.path, processes=processes,
                     samples_per_step=sps, metrics=m, step_se_rel=se_rel,
                     dollars_per_second=h.cost.per_recoverable_second if h and h.cost else None,
                     crowded_cores=a.host.crowded_cores() if a.host is not None else None,
                     cores=a.host.logical_cores if a.host is not None else None,
                     cpu_attained=a.host.main_cpu_attained if a.host is not None else None)


def scaling_cost(base: RunColumn, col: RunColumn) -> ScalingCost:
    """What the larger size buys and what it costs, per unit of work: the speedup (throughput ratio), the
    time and the cost per 1k samples at each size, and the verdict.

    Cost per sample scales as processes ÷ throughput whatever the price, so the change in cost is
    (N/N0) ÷ speedup − 1 = 1/efficiency − 1 even for an unpriced run; it is stated in dollars per 1k
    samples when both runs are priced (``--price-per-gpu-hour``, or a known GPU model), else in
    process-seconds (GPU-seconds on a GPU job) per 1k samples. Both are at steady throughput, the basis of
    the speedup: the run's own cost per 1k samples (the compare table's row) also pays for its start-up,
    which on short runs differs between the two sizes by more than the scaling itself and would decide
    the verdict. Priced, each size pays what it holds: its GPUs, or on CPU its machines (two ranks on one
    machine cost that machine). The verdict says "more GPUs raise cost faster than they cut
    time" when the cost per sample grows by a larger fraction than the time per sample shrinks — e.g. 2× the
    GPUs for 1.4× the speed: +43 % cost for −29 % time."""
    t0, t1 = base.metrics["throughput"], col.metrics["throughput"]
    if not t0 or not t1:
        raise ValueError("scaling_cost needs both runs' throughput")
    speedup = t1 / t0
    cost_change = (col.processes / base.processes) / speedup - 1
    time_change = 1 / speedup - 1
    p0, p1 = base.dollars_per_second, col.dollars_per_second
    priced = p0 is not None and p1 is not None
    per_1k = ([p0 * 1000 / t0, p1 * 1000 / t1] if p0 is not None and p1 is not None else
              [base.processes * 1000 / t0, col.processes * 1000 / t1])
    c0, c1 = per_1k
    unit = "$ per 1k samples" if priced else "process-seconds per 1k samples"
    if priced:
        cost_change = c1 / c0 - 1  # the prices themselves may differ (another GPU model at the other size)
    if speedup <= 1:
        verdict = (f"{col.processes} processes are no faster than {base.processes} "
                   f"({speedup:.2f}×) and cost {cost_change:+.0%} per sample: stay at {base.processes}")
        worse = True
    elif cost_change > -time_change:
        verdict = (f"more GPUs raise cost faster than they cut time: {speedup:.2f}× faster ({time_change:+.0%} "
                   f"time per sample) for {cost_change:+.0%} cost per sample")
        worse = True
    else:
        verdict = (f"{speedup:.2f}× faster ({time_change:+.0%} time per sample) for {cost_change:+.0%} cost per "
                   "sample: time falls faster than cost rises")
        worse = False
    return {"speedup": speedup, "cost_change": cost_change, "time_change": time_change, "per_1k": per_1k,
            "per_1k_unit": unit, "verdict": verdict, "cost_outpaces_time": worse}


def _shared_host(base: RunColumn, col: RunColumn) -> str:
    """What the band cannot cover: other processes crowding the host during either run change its step
    time by whatever share of the CPU they took, which no floor from identical runs bounds."""
    crowded = [f"{c.label} ({c.crowded_cores:.1f} of {c.cores} cores)" if c.cores else
               f"{c.label} ({c.crowded_cores:.1f} cores)" for c in (base, col) if c.crowded_cores is not None]
    if not crowded:
        return ""
    return (". The host was shared — other processes used the CPU while " + " and ".join(crowded) +
            " ran: a step-time difference between these runs may be that load, not the job; compare runs "
            "taken on a quiet host")


def compare(columns: list[RunColumn], gates: list[Gate]) -> Comparison:
    base = columns[0]
    deltas: list[dict[str, float | None]] = []
    beyond: list[dict[str, bool | None]] = []
    bands: list[float] = []
    within: list[float | None] = []
    loads: list[float] = []
    for col in columns:
        d: dict[str, float | None] = {}
        b: dict[str, bool | None] = {}
        load = load_band((base.cpu_attained, col.cpu_attained))
        loads.append(load)
        band = max(single_run_band(base.step_se_rel, col.step_se_rel), load)
        within.append(2 * math.hypot(base.step_se_rel, col.step_se_rel)
                      if base.step_se_rel is not None and col.step_se_rel is not None else None)
        for k in METRICS:
            x0, x = base.metrics.get(k), col.metrics.get(k)
            change = (x - x0) / abs(x0) if x is not None and x0 is not None and x0 != 0 else None
            d[k] = change
            b[k] = (abs(change) > band) if change is not None and k in (
                "throughput", "tokens_per_s", "step_time") else None
        deltas.append(d)
        beyond.append(b)
        bands.append(band)
    scaling: list[Scaling] = []
    for col in columns[1:]:
        t0, t1 = base.metrics["throughput"], col.metrics["throughput"]
        if col.processes != base.processes and t0 and t1:
            ideal = col.processes / base.processes
            eff = t1 / (ideal * t0)
            regime = "weak (fixed per-process batch)"
            if base.samples_per_step and col.samples_per_step:
                if abs(col.samples_per_step * col.processes - base.samples_per_step * base.processes) <= \
                        0.01 * base.samples_per_step * base.processes:
                    regime = "strong (fixed global batch)"
            scaling.append({"run": col.label, "from": base.processes, "to": col.processes,
                            "efficiency": eff, "regime": regime,
                            "formula": "throughput(N) ÷ (N/N0 · throughput(N0))",
                            **scaling_cost(base, col)})
    results = []
    for gate in gates:
        for col, d, b, band in zip(columns[1:], deltas[1:], beyond[1:], bands[1:]):
            value = d.get(gate.metric) if gate.relative else col.metrics.get(gate.metric)
            if value is None:
                # A gate that cannot be checked must not pass silently: CI would go green on a run that
                # lost the very metric it guards (no samples, no GPU telemetry…).
                results.append(GateResult(gate.text, col.label, None, True, None,
                                          f"{gate.metric} not available for this run: the gate cannot be "
                                          "checked (an error, not a pass)", unavailable=True))
                continue
            shown = value * 100 if gate.relative else value
            crossed = _OPS[gate.op](shown, gate.value)
            # A relative gate on a noise-banded metric fails only on a change beyond the noise: two identical
            # runs differ by up to the band, and a CI gate that fails on that is a coin toss.
            noise = gate.relative and crossed and b.get(gate.metric) is False
            failed = crossed and not noise
            unit = "%" if gate.relative else ""
            detail = f"{gate.metric} = {shown:+.2f}{unit}" if gate.relative else f"{gate.metric} = {shown:.4g}"
            if noise:
                detail += (f" crosses {gate.value:+g}% but is within the noise (±{band:.0%}): not a change these "
                           "runs can show; repeat them to resolve a smaller one")
            results.append(GateResult(gate.text, col.label, shown, failed, b.get(gate.metric), detail))
    notes: list[str | None] = [None]
    notes += [band_statement(bands[i], within[i]) + _shared_host(base, columns[i]) + (
        ". " + load_statement((base.label, columns[i].label),
                              (base.cpu_attained or 0.0, columns[i].cpu_attained or 0.0), loads[i])
        if loads[i] else "") for i in range(1, len(columns))]
    return Comparison(runs=columns, deltas=deltas, beyond_noise=beyond, noise_band=bands, scaling=scaling,
                      noise_notes=notes,
                      gates=results)
