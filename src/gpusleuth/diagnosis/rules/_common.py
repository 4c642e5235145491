"""Helpers every rule family shares: one way to turn "seconds saved" into a :class:`Gain`, and one way to
say "this rule needs GPU telemetry / a trace".

Why one place: the scenario suite compares ``Gain.speedup`` with a measured speedup, so every rule must
mean the same thing by it — the throughput ratio of the *training loop* (first step start → last step
end, phases included) before and after the fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Gain, Missing

if TYPE_CHECKING:  # the type of Facts.traces' items, for the annotations below (rules see only Facts)
    from gpusleuth.analysis.trace import TraceAnalysis

PROFILE_HOW = ("record a profiler trace of a few steps: `gpusleuth run --profile-steps 5-8 -- python train.py` "
               "(works on CPU too)")


def gain_from_seconds(facts: Facts, saved_s: float, method: str, *, per_step: bool = True) -> Gain:
    """``saved_s``: seconds the fix saves over the whole run. ``per_step``: the saving is inside steps (its
    ``step_share`` is of step time); otherwise it is phase time (``step_share`` is of the loop)."""
    o = facts.outcomes
    saved_s = max(saved_s, 0.0)
    loop = facts.loop
    base = o.steps.step_time_s if per_step and o.steps.step_time_s else loop
    saved_s = min(saved_s, loop * 0.999)
    return Gain(
        step_share=min(saved_s / base, 1.0) if base else 0.0,
        wall_share=min(saved_s / o.wall_s, 1.0) if o.wall_s else 0.0,
        seconds_per_run=saved_s,
        speedup=loop / (loop - saved_s) if loop > saved_s else float("inf"),
        method=method,
        dollars_per_run=saved_s * facts.dollars_per_second if facts.dollars_per_second is not None else None,
    )


def no_gpu(rule: str, facts: Facts, cause: str | None = None) -> Missing:
    why = facts.gpu_note or "no GPU samples in this run"
    return Missing(rule=rule, needs=f"GPU telemetry ({why})",
                   how="run the job with `gpusleuth run` on a machine with an NVIDIA GPU and driver", cause=cause,
                   data="GPU telemetry")


def no_trace(rule: str, cause: str | None = None, what: str = "a profiler trace") -> Missing:
    return Missing(rule=rule, needs=what, how=PROFILE_HOW, cause=cause, data="a profiler trace")


def no_device_trace(facts: Facts, rule: str, cause: str | None = None,
                    what: str = "a profiler trace with GPU activity") -> Missing:
    """A rule that reads the device timeline: after `--profile-steps` on a CPU-only machine the traces are
    there but hold no device work, and "record with --profile-steps" is the one advice that cannot help."""
    if not facts.traces:
        return no_trace(rule, cause, what)
    return Missing(rule=rule, needs=f"{what} (this run's profiler traces are CPU-only: no kernels or copies)",
                   how="profile the job on a machine with a GPU (`gpusleuth run --profile-steps 5-8 -- …` records "
                       "the device's kernels and copies there)", cause=cause, data="a GPU profiler trace")


def no_steps(rule: str, cause: str | None = None) -> Missing:
    return Missing(rule=rule, needs="training steps",
                   how="run a PyTorch training loop under `gpusleuth run` (steps are found automatically), "
                       "or mark steps with gpusleuth.step()", cause=cause, data="training steps",
                   training_only=True)


def device_traces(facts: Facts) -> list[TraceAnalysis]:
    """Traces that saw device work (a CPU-only trace has nothing to say about the device)."""
    return [t for t in facts.traces if t.device_span_s > 0]


def step_idle(trace: TraceAnalysis, cats: tuple[str, ...]) -> tuple[float, float]:
    """(seconds in the partition categories ``cats`` summed over the trace's steps — idle causes, comm,
    copies — and the total step seconds)."""
    total = sum(s.duration_s for s in trace.steps)
    part = sum(s.partition.get(c, 0.0) for s in trace.steps for c in cats)  # a category absent is none
    return part, total


def run_seconds(facts: Facts, share: float) -> float:
    """Seconds over the whole run for a share of step time measured on a trace's profiled steps."""
    s = facts.outcomes.steps
    return share * s.step_time_s if s.steps else 0.0


def host_cpu_p50(facts: Facts) -> float | None:
    """Median host CPU (% of all cores) while the training steps ran; the whole run's when no window."""
    h = facts.host
    if h is None:
        return None
    dist = h.cpu_pct_steps or h.cpu_pct
    return dist["p50"] if dist else None



def job_cpu_pct(facts: Facts) -> tuple[float, str] | None:
    """(CPU the job used while its steps ran, in % of one core per GPU-feeding loop; what it counts), None
    unmeasured. Every process of the job's tree (``HostSummary.job_cores_steps``): the training process, its
    DataLoader workers, Hogwild's trainers, the processes it hands its work to. The training process alone read a
    loop that waits on a pipe while its workers burn the host's cores as "CPU idle". A distributed job's ranks
    each feed their own GPU: the job's CPU is shared among them (this host's ranks: a job read from several
    machines' directories counts the processes and ranks of the machine its host samples are from)."""
    h = facts.host
    if h is None or h.job_cores_steps is None:
        return None
    s = facts.outcomes.steps
    if h.host_ranks is not None:
        ranks = max(len(h.host_ranks), 1)
    else:
        ranks = len(s.ranks) if s.workers == "ranks" and s.ranks else 1
    processes = h.job_processes or 0  # set with job_cores_steps
    what = f"the job's {processes} processes" if processes > 1 else "the training process"
    return h.job_cores_steps * 100 / ranks, what + (f", per rank of {ranks}" if ranks > 1 else "")


COPY_SHARE = 0.5  # copies ≥ half the device's busy time: the device mostly moves bytes
COPY_MIN_S = 0.010
H2D_COVERS = 0.8  # host-to-device copies this much of all copy time: the H2D finding tells the whole story
BUSY_CATS = ("compute", "comm", "memset")


def device_cats(trace: TraceAnalysis) -> tuple[str, ...]:
    """The partition categories in which the device works (compute, communication, copies, sets) that this
    trace's steps hold."""
    seen = {c for s in trace.steps for c in s.partition}
    return tuple(sorted(c for c in seen if c in BUSY_CATS or c.startswith("memcpy")))


def device_copies(trace: TraceAnalysis) -> tuple[dict[str, float], float]:
    """(seconds per copy category, device busy seconds) from the trace's device-span partition."""
    part = trace.span_partition
    copies = {k: v for k, v in part.items() if k.startswith("memcpy") and v > 0}
    return copies, sum(copies.values()) + sum(part.get(k, 0.0) for k in BUSY_CATS)


def copy_bound_speaks(trace: TraceAnalysis) -> bool:
    """One answer, read by both copy rules, to "who names this trace's copies": the copy-bound rule when
    the device is mostly copying and host-to-device copies are not most of it (D2H, D2D, migrations — an
    H2D-only title would hide half the copies: a held-out OpenMP-offload export copied 49 % H2D and 47 %
    D2H and was called a moderate H2D problem); the H2D rule otherwise."""
    copies, busy = device_copies(trace)
    copy_s = sum(copies.values())
    if not busy or copy_s < COPY_MIN_S or copy_s / busy < COPY_SHARE:
        return False
    h2d = sum(v for k, v in copies.items() if k.startswith("memcpy_h2d"))
    return h2d < H2D_COVERS * copy_s
