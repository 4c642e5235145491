"""``input.spikes``: a few steps carry the input wait while the typical step barely waits."""

from __future__ import annotations


from gpusleuth.diagnosis.facts import Facts, LoaderConfig
from gpusleuth.diagnosis.finding import Evidence, Finding
from gpusleuth.diagnosis.rules._common import gain_from_seconds
from gpusleuth.diagnosis.rules._framework import loader_fix
from gpusleuth.diagnosis.rules.input._shared import MODERATE


def spike_steps(facts: Facts, loader: LoaderConfig | None, share: float, typical: float, body_s: float
                ) -> list[Finding]:
    """The loop's input wait is carried by a few steps while the typical step barely waits. Those steps are
    their own thing: a DataLoader whose workers start again at every epoch (``persistent_workers=False``), a
    second loader read inside the steps, a cold cache. More workers or faster storage would not change the
    typical step, so neither ``input.io`` nor ``input.preprocessing`` is named (field case: data in memory read
    "waits on storage, confidence high" at a 3 ms median wait, the mean carried by two epoch-boundary steps)."""
    s = facts.outcomes.steps
    spike_share = s.data_wait_spike_s / body_s if body_s > 0 else 0.0
    if spike_share < MODERATE or s.data_wait_spike_steps < 2:
        return []  # one long wait is an anecdote (a preempted step on a busy host), not a pattern to fix
    workers = loader.get("num_workers") if loader else None
    restart = bool(workers) and loader is not None and not loader.get("persistent_workers")
    evidence = [
        Evidence("exposed data wait", round(share * 100, 1), "% of step time (mean)", "step instrumentation"),
        Evidence("typical step's data wait", round((s.data_wait_p50_s or 0.0) * 1e3, 2),
                 f"ms (median; {typical:.1%} of step time without the long waits)", "step instrumentation"),
        Evidence("steps that waited far longer", s.data_wait_spike_steps,
                 f"of {s.steps}, {s.data_wait_spike_s:.2f} s beyond the median", "step instrumentation"),
    ]
    if workers is not None:
        evidence.append(Evidence("DataLoader workers", workers,
                                 f"persistent_workers={bool(loader.get('persistent_workers')) if loader else None}",
                                 "DataLoader seen at run time"))
    if restart:
        fix = (f"{loader_fix(facts, int(workers or 0), loader=loader)}: persistent_workers=True keeps the {workers} worker(s) "
               "alive across epochs, so each epoch's first batches do not wait for workers to start again.")
        method = "the long waits' excess over the typical wait removed (upper bound: worker start-up per epoch)"
        gain = gain_from_seconds(facts, s.data_wait_spike_s, method)
    else:
        fix = ("Look at what the long-waiting steps hold (the report's structure note; a profiler trace of one): "
               "an evaluation or a second loader read inside the loop, or a cold cache. The typical step does "
               "not wait, so more workers or faster storage would not help it.")
        gain = None
    return [Finding(
        cause="input.spikes", severity="moderate",
        title=f"A few steps carry the input wait: {s.data_wait_spike_steps} of {s.steps} waited far longer than the "
              "typical step",
        summary=(f"The loop waited on its input for {share:.0%} of step time, but the typical step for "
                 f"{typical:.1%}: {s.data_wait_spike_steps} step(s) carry the rest"
                 + (" — the loader's workers start again at every epoch." if restart else ".")),
        evidence=evidence, fix=fix, estimated_gain=gain, confidence="medium" if restart else "low")]
