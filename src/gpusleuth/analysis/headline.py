"""The outcome headline every report opens with: throughput, goodput and badput, MFU, energy, cost,
time to target. Assembled here from the analyses so renderers only format it.

Reads no file: the user's price table and MLLOG lines are read by ``sources/`` (``report/inputs.py``
gathers them) and handed in, so the same numbers come out of ``report``, ``compare`` and sweeps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpusleuth.analysis.cost import Cost, compute_cost, find_price, price_table
from gpusleuth.analysis.energy import Energy, compute_energy
from gpusleuth.analysis.goodput import Goodput, SteadyState, compute_goodput, steady_state
from gpusleuth.analysis.mfu import Mfu, MfuOptions, compute_mfu
from gpusleuth.analysis.options import AnalysisOptions
from gpusleuth.analysis.outcomes import Outcomes
from gpusleuth.analysis.peaks import gpu_model
from gpusleuth.analysis.quality import Target, TimeToTarget, compute_time_to_target
from gpusleuth.analysis.telemetry import GpuSummary
from gpusleuth.analysis.steps import StepView
from gpusleuth.run.model import Run

if TYPE_CHECKING:  # the parsed lines are handed in; analysis reads no file
    from gpusleuth.sources.mllog import MlLog


@dataclass
class Headline:
    steady: SteadyState
    goodput: Goodput
    mfu: Mfu
    energy: Energy | None
    cost: Cost | None
    cost_note: str | None
    time_to_target: TimeToTarget | None
    gpu_model: str | None
    gpus_used: int
    notes: list[str] = field(default_factory=list)


def machines(run: Run) -> int:
    """Hosts the job's ranks ran on: what a CPU-only job pays for (the price is the machine's). Two ranks on
    one machine cost that machine; one run directory per node of a job merged into one Run, each node."""
    hosts = {p.host for p in run.processes.values() if p.rank is not None and p.host}
    return max(len(hosts), 1)


def compute_headline(run: Run, view: StepView, outcomes: Outcomes, gpus: list[GpuSummary], opts: AnalysisOptions,
                     prices: dict[str, float] | None = None, mllog: MlLog | None = None, job_dtype: str | None = None) -> Headline:
    """``prices``: the user's price table (over the defaults); ``mllog``: parsed ``:::MLLOG`` lines or None;
    ``job_dtype``: the precision most of the job's GEMM time ran in (its profiler traces), for MFU on a
    card without a peak for the default dtype."""
    notes: list[str] = list(view.structure.notes)  # the structure check's sentences (analysis/structure.py)
    steady = steady_state(run, view)
    goodput = compute_goodput(run, outcomes, steady)
    n_gpus = len(gpus)  # the job's GPUs only (analysis/job_gpus.py decided which)
    gpu_name = gpus[0].name if gpus else None
    model = gpu_model(gpu_name) or gpu_name

    steps = view.main.table if view.main else None
    tokens_per_step = None
    if steady.tokens_per_s and steady.step_time_p50_s:
        tokens_per_step = steady.tokens_per_s * steady.step_time_p50_s
    clock = None
    if gpus and gpus[0].sm_clock_mhz and gpus[0].max_sm_clock_mhz:
        clock = gpus[0].sm_clock_mhz["mean"] / gpus[0].max_sm_clock_mhz
    mfu = compute_mfu(run, steady.step_time_p50_s, tokens_per_step, gpu_name, max(n_gpus, 1), clock,
                      MfuOptions(flops_per_step=opts.flops_per_step, params=opts.params,
                                 peak_tflops=opts.peak_tflops, peak_dtype=opts.peak_dtype),
                      job_dtype=job_dtype, sm_count=gpus[0].sm_count if gpus else None, main=view.pid)

    energy = compute_energy(run, view, [g.index for g in gpus])

    price = find_price(model, opts.price_per_gpu_hour, price_table(prices))
    cost = None
    cost_note = None
    if price is None:
        cost_note = (f"no price for {model!r} in the table: pass --price-per-gpu-hour" if model else
                     "no GPU: pass --price-per-gpu-hour with the machine's hourly price to get costs")
    else:
        samples = outcomes.steps.job_samples if outcomes.steps.job_samples is not None else outcomes.steps.samples
        wall = outcomes.wall_s
        sps_wall = samples / wall if samples and wall else None
        per_epoch = None
        for info in run.infos:
            if info.get("kind") == "dataloader" and info.get("dataset_len"):
                per_epoch = int(info["dataset_len"])
                break
        cost = compute_cost(price, n_gpus or machines(run), wall, samples, sps_wall, per_epoch)

    ttt = None
    if mllog and mllog.bad_lines:
        notes.append(f"{mllog.bad_lines} ':::MLLOG' line(s) were not valid JSON and were skipped")
    if opts.target:
        first_touch = int(steps["start_ns"].min()) if steps is not None and len(steps) else None
        ttt = compute_time_to_target(Target.parse(opts.target), run.logs, mllog, first_touch)
    return Headline(steady=steady, goodput=goodput, mfu=mfu, energy=energy, cost=cost, cost_note=cost_note,
                    time_to_target=ttt, gpu_model=model, gpus_used=n_gpus, notes=notes)


__all__ = ["Headline", "compute_headline"]
