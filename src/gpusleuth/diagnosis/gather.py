"""``build_facts(analysis) -> Facts``: the one constructor of what the rules see.

Why here and not in the rules: rules see only :class:`Facts` (numbers), so this is the single place the
diagnosis turns a :class:`~gpusleuth.analysis.bundle.RunAnalysis` into them — the analysis's summaries as
they are (the training loop's phases, span, threads and first step come computed, in ``RunAnalysis.loop``).
Any Run works: a recording, a trace read alone (gains against its traced steps), or telemetry alone; each
rule checks that its data is there. The diagnosis never sees the Run.
"""

from __future__ import annotations

from gpusleuth.analysis.bundle import RunAnalysis
from gpusleuth.analysis.outcomes import Outcomes, StepStats
from gpusleuth.diagnosis.facts import Facts


def build_facts(a: RunAnalysis) -> Facts:
    basis = a.basis
    if basis is None:  # nothing to measure gains against: no steps, no traced device time
        wall = a.info.wall_s or 0.0
        basis = Outcomes(wall_s=wall, startup_s=0.0, tail_s=0.0, time_share={}, time_s={}, steps=StepStats())
    loop = a.loop
    return Facts(
        outcomes=basis,
        gpus=a.gpus,
        host=a.host,
        gpu_note=a.gpu_note,
        dataloaders=list(loop.dataloaders),
        logical_cores=loop.logical_cores,
        cpu_limit_cores=loop.cpu_limit_cores,
        gpu_hw=list(loop.gpu_hw),
        phases=dict(loop.phases),
        loop_s=loop.loop_s,
        threads=loop.threads,
        traces=list(a.traces),
        host_ops=list(a.host_ops),
        first_step=dict(loop.first_step),
        batches_per_step=loop.batches_per_step,
        framework=loop.framework,
        dollars_per_second=a.dollars_per_second,
        recorded=a.recorded,
        step_doubt=a.view.structure.notes[0] if a.view.structure.doubtful and a.view.structure.notes else None,
        gpu_timeline=list(a.gpu_timeline),
        comm=a.comm,
        load=a.load,
        requests=a.requests,
        engine=a.engine,
        stalls=list(a.stalls),
    )
