"""Rules for GPU telemetry alone (an imported nvidia-smi / dmon / DCGM log, no steps, no trace).

What a log of utilization over time proves by itself: a GPU that sat idle (and what that cost), a
bursty GPU that waits between bursts (a stall, not sizing), a GPU steadily half-used with memory to
spare (sizing, not a stall), and GPUs of one job loaded unevenly. Recorded runs have steps and traces
and better rules; these fire only when ``facts.gpu_timeline`` is filled, which the gathering does for
telemetry-only runs. Captures shorter than ``MIN_COVERED_S`` are too short to judge.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts, GpuTimeline, Utilization
from gpusleuth.diagnosis.finding import Evidence, Finding, Gain, Missing
from gpusleuth.diagnosis.rules._scope import per_gpu, the_gpu

MIN_COVERED_S = 60.0
IDLE_HIGH = 0.5  # idle share of the capture: high
IDLE_MODERATE = 0.2
BURSTY_IDLE = 0.15  # idle between bursts, with at least BURSTY_STRETCHES stretches
BURSTY_STRETCHES = 3
SIZING_MEAN = 50.0
SPREAD = 25.0  # points of mean utilization between the busiest and the idlest GPU
BUSY_FLOOR = 30.0  # imbalance matters only when the busiest GPU does real work


def _usable(facts: Facts) -> list[tuple[GpuTimeline, Utilization]]:
    """The GPUs whose utilization covers enough time to judge, each with that utilization."""
    return [(t, t.util) for t in facts.gpu_timeline if t.util is not None and t.covered_s >= MIN_COVERED_S]


def _idle_gain(facts: Facts, idle_gpu_s: float) -> Gain:
    n = max(len(facts.gpu_timeline), 1)
    wall = max(t.covered_s for t in facts.gpu_timeline)
    return Gain(step_share=0.0, wall_share=min(idle_gpu_s / n / wall, 1.0) if wall else 0.0,
                seconds_per_run=idle_gpu_s / n, speedup=1.0,
                method="idle GPU time at the GPU-hour price: what the idle card cost, not a speed-up",
                dollars_per_run=(idle_gpu_s / n * facts.dollars_per_second
                                 if facts.dollars_per_second is not None else None))


def idle_gpus(facts: Facts) -> list[Finding] | Missing:
    telemetry_only = not facts.recorded and not facts.traces and bool(facts.gpus)
    if not facts.gpu_timeline and not telemetry_only:
        return []  # a recorded run: its steps and traces are judged by the other rules
    if not _usable(facts):
        # a power-only log, or one shorter than a minute: say so rather than report nothing (a held-out
        # `timestamp, power.draw` log at 50 ms, 3.6 s long, got no finding and no word why)
        return Missing(rule="idle GPUs", needs=f"≥ {MIN_COVERED_S:.0f} s of utilization.gpu samples per GPU",
                       how="log utilization for longer: `nvidia-smi --query-gpu=timestamp,index,utilization.gpu,"
                           "memory.used,power.draw --format=csv -l 1 -f gpu.csv` for the whole job",
                       cause="sync", data="GPU utilization over time")
    idle = [(t, u) for t, u in _usable(facts) if u.idle_share >= IDLE_MODERATE]
    if not idle:
        return []
    # One finding for the job, however many cards idled: an 8-GPU log gave 8 near-copies before. The cost
    # is every idle card's GPU-hours together; the evidence keeps each card's own numbers.
    idle.sort(key=lambda tu: -tu[1].idle_share)
    share = idle[0][1].idle_share
    idle_gpu_s = sum(u.idle_share * t.covered_s for t, u in idle)
    return [Finding(
        cause="sync", severity="high" if share >= IDLE_HIGH else "moderate",
        title=_idle_title(idle, len(_usable(facts)), idle_gpu_s / 3600),
        summary=" ".join(_idle_sentence(t, u) for t, u in idle[:4])
        + (f" {len(idle) - 4} more GPUs idled too (evidence)." if len(idle) > 4 else "")
        + " Nothing used the card then, but it was paid for.",
        evidence=_idle_evidence(*idle[0]) if len(idle) == 1 else (
            [Evidence(f"GPU {t.index} idle (utilization ≤ 5%)", round(u.idle_share * 100, 1),
                      f"% of sampled time; {t.idle_gpu_hours:.3f} GPU-hours", "GPU log") for t, u in idle]
            + [Evidence("idle GPU-hours", round(idle_gpu_s / 3600, 3), "h (all idle GPUs)", "GPU log")]),
        fix=("Give the card work or give it back: if a job waits (input, a sync, a queue), record it with "
             "`gpusleuth run -- python train.py` to see on what; if the job uses fewer GPUs than it holds, "
             "request fewer; end idle notebooks/processes holding the device."),
        estimated_gain=_idle_gain(facts, idle_gpu_s), confidence="high",
    )]


def _idle_title(idle: list[tuple[GpuTimeline, Utilization]], usable: int, hours: float) -> str:
    """``idle``: the idle GPUs, the idlest first."""
    t, u = idle[0]
    if len(idle) == 1:
        return f"GPU {t.index} sat idle {u.idle_share:.0%} of the capture ({t.idle_gpu_hours:.2f} GPU-hours)"
    low = min(x.idle_share for _, x in idle)
    names = ", ".join(str(x.index) for x in sorted((x for x, _ in idle), key=lambda x: str(x.index))[:8])
    more = "…" if len(idle) > 8 else ""
    return (f"{len(idle)} of {usable} GPUs sat idle {low:.0%}–{u.idle_share:.0%} of the capture "
            f"(GPUs {names}{more}; {hours:.2f} GPU-hours)")


def _idle_sentence(t: GpuTimeline, u: Utilization) -> str:
    share = u.idle_share
    holding = t.patterns.get("idle_holding_memory", 0.0)
    return (f"GPU {t.index} ran kernels ≤5% of the time for {share:.0%} of the {t.covered_s / 3600:.2f} h it was "
            f"sampled, in {t.idle_stretches} idle stretch(es) of ≥10 s (longest {t.longest_idle_s / 60:.1f} min)"
            + (f"; {holding / share:.0%} of that idle time a process held its memory (a job waiting, a notebook "
               "or a hung process keeps the card)" if share and holding else "") + ".")


def _idle_evidence(t: GpuTimeline, u: Utilization) -> list[Evidence]:
    return [Evidence("idle share (utilization ≤ 5%)", round(u.idle_share * 100, 1), "% of sampled time", "GPU log"),
            Evidence("mean utilization", round(u.mean, 1), "%", "GPU log"),
            Evidence("idle stretches ≥ 10 s", t.idle_stretches, "", "GPU log"),
            Evidence("longest idle stretch", round(t.longest_idle_s, 1), "s", "GPU log"),
            Evidence("idle while holding memory", round(t.patterns.get("idle_holding_memory", 0.0) * 100, 1),
                     "% of sampled time", "GPU log"),
            Evidence("idle GPU-hours", round(t.idle_gpu_hours, 3), "h", "GPU log")]


@per_gpu
def bursty_or_steady(facts: Facts) -> list[Finding] | Missing:
    """Sizing vs stall from the time series: bursts with idle between them mean the job waits on something
    (stall); a steady partial load with memory to spare means the job is small for the card (sizing)."""
    g = the_gpu(facts)
    found = next(((t, u) for t, u in _usable(facts) if g is not None and t.index == g.index), None)
    if found is None:  # no utilization timeline (a recorded run with steps), or too short a one for this card
        return []
    t, u = found
    idle = u.idle_share
    if idle >= IDLE_MODERATE:
        return []  # the idle rule says it
    if idle >= BURSTY_IDLE and t.idle_stretches >= BURSTY_STRETCHES and u.busy_share >= 0.2:
        return [Finding(
            cause="sync", severity="moderate",
            title=f"GPU {t.index} works in bursts with idle between them: a stall, not sizing",
            summary=(f"Utilization swings (σ {u.std:.0f} points around a {u.mean:.0f}% mean): busy "
                     f"{u.busy_share:.0%} of the time, idle {idle:.0%} in {t.idle_stretches} stretches of ≥10 s. "
                     "Something makes the device wait between bursts — input, a host sync, checkpoints or "
                     "evaluation; a bigger batch would not help."),
            evidence=[Evidence("utilization σ", round(u.std, 1), "points", "GPU log"),
                      Evidence("busy (≥ 50%)", round(u.busy_share * 100, 1), "% of sampled time", "GPU log"),
                      Evidence("idle (≤ 5%)", round(idle * 100, 1), "% of sampled time", "GPU log"),
                      Evidence("idle stretches ≥ 10 s", t.idle_stretches, "", "GPU log")],
            fix=("Record the job with `gpusleuth run -- python train.py` to attribute the waits to steps "
                 "(data wait, sync, phases)."),
            estimated_gain=_idle_gain(facts, idle * t.covered_s), confidence="medium",
        )]
    peak = g.mem_used_share_max if g is not None else None
    if u.mean < SIZING_MEAN and peak is not None and peak < 0.5 and idle < BURSTY_IDLE:
        return [Finding(
            cause="sizing", severity="moderate",
            title=f"GPU {t.index} is steadily half-used with memory to spare: the job is small for this card",
            summary=(f"Utilization held near {u.mean:.0f}% (σ {u.std:.0f}) with little idle time and peak "
                     f"memory at {peak:.0%}: no sign of waiting, just too little work per kernel for the device."),
            evidence=[Evidence("mean utilization", round(u.mean, 1), "%", "GPU log"),
                      Evidence("utilization σ", round(u.std, 1), "points", "GPU log"),
                      Evidence("peak memory", round(peak * 100, 1), "% of device", "GPU log")],
            fix=("A larger batch or model per GPU, or share the card (MIG/MPS), or a smaller, cheaper GPU; "
                 "verify with `gpusleuth sweep`."),
            estimated_gain=None, confidence="medium",
        )]
    return []


def gpu_imbalance(facts: Facts) -> list[Finding] | Missing:
    usable = _usable(facts)
    if len(usable) < 2:
        return []
    means = {t.index: u.mean for t, u in usable}
    hi = max(means, key=lambda k: means[k])
    lo = min(means, key=lambda k: means[k])
    spread = means[hi] - means[lo]
    if spread < SPREAD or means[hi] < BUSY_FLOOR:
        return []
    lazy = [t for t, u in usable if u.idle_share < IDLE_MODERATE and means[hi] - u.mean >= SPREAD]
    if not lazy:
        return []  # the lagging GPUs are idle ones, called out by idle_gpus
    return [Finding(
        cause="straggler", severity="moderate",
        title=f"GPUs unevenly loaded: GPU {hi} at {means[hi]:.0f}%, GPU {lo} at {means[lo]:.0f}%",
        summary=("The GPUs of this log did unequal work; in data-parallel training every step waits for the "
                 "slowest rank, so the busy one sets the pace and the others idle at each synchronization — or "
                 "the work is not spread over them at all."),
        evidence=[Evidence(f"GPU {i} mean utilization", round(v, 1), "%", "GPU log") for i, v in sorted(means.items())],
        fix=("Check the sharding (equal batch per rank, balanced pipeline stages, uneven sequence lengths), and "
             "that every GPU the job holds is used; record per-rank traces to find the straggler."),
        estimated_gain=None, confidence="medium",
    )]

