"""Stragglers the way they show in synchronous data parallelism: the rank the others wait for.

Replaces the old step-time-spread rule: in synchronous DDP every rank's step lasts as long as the
slowest one's (they all meet in the all-reduce), so per-rank step times are equal by construction and
cannot show a straggler. What the ranks do differ in is *waiting*: ``analysis.comm`` matches every
collective across ranks (hook records: host arrival times; profiler traces: collective kernel time) and
says who arrived last and how long the others waited for it.

Fires when one rank caused ≥ 60 % of all the waiting (a consistent straggler, not the jitter that makes
ranks take turns arriving last) and, in their median step, the others lose ≥ 10 % of it waiting for *its
own extra work* (moderate; ≥ 25 % high: NVRx calls a rank a straggler below 0.75 of the fastest rank's
speed). Ascend's advisor uses 5 % of per-rank time, but sleep and scheduler jitter on a busy host alone
reach ~5 % of a 25 ms step (measured: a balanced 2-rank gloo job waits 4.7–4.9 % in mean), so 10 %.

*Its own extra work* (``CommSummary.owned_per_step_s``): the others' wait, but no more than the slow
rank's step is longer than theirs outside collectives (input wait + everything else; the lesser of the
ranks' medians compared and the same steps compared, see ``analysis/comm.py``). Arriving last
consistently is not enough, because ranks that share too few free cores take turns: the one descheduled
arrives last, and a balanced job falls into a fixed order for tens of steps. Measured on the field
corpus' torchrun DDP tutorial (2 gloo ranks, balanced by construction, 1.2–2.9 ms steps, 2-core host):
arrival gaps of ±0.85–0.9 ms (one rank's work between collectives), one sign for 30+ steps, then the
other; rank 0 "slow" in 6 of 12 recordings, rank 1 in 6 (no fixed culprit: not the TCP store's host, not
the logging rank). The bare script (no gpusleuth) shows it too: its ranks print their step clock
0.02–0.03 ms apart on 2 free cores, 0.6–0.7 ms apart pinned to one core or beside other load. Worst
recording: the others waited 0.75 ms of a 2.11 ms step (35 %, rank 0 caused 86 % of the waiting: HIGH),
while rank 0's step outside collectives was 0.03 ms *shorter* than theirs — it was descheduled inside its
all-reduce, as long in it as the rank waiting for it. Over 20 plain recordings (load 0.8–3.6) the old
reading (the whole wait) gave 9 findings, 3 of them ≥ 25 % (35–49 %) (HIGH on a host without other load);
this one gives none (own extra time ≤ 4 % of a step). Profiled, 6 of 12 recordings waited 32–72 %; in the
7 read again with this rule own extra time was 0–4 %, once 12 % (that rank's time outside collectives
1.5–4 ms longer in half its steps beside other load: moderate with low confidence, as the crowded-host
clause below says). A real straggler's own extra time tracks what was planted: ``workloads/ddp_gloo.py``
with rank 1 sleeping 0.5 / 1 / 2 ms a step (2–5 ms steps, load 3) measured 0.38–0.70 / 1.03–1.17 /
2.08–2.18 ms own extra time against 0.65–0.68 / 1.15–1.75 / 2.19–2.95 ms waited: the wait is the planted
work plus the host's noise, and only the first would go away. So the share, the title and the gain are
its own extra time's; the whole wait stays in the evidence. From traces the others' excess collective
time is the slow rank's extra time by construction (their steps are equal), so the check changes nothing
there. Gain: that wait, if the straggler ran at their pace — an upper bound, as its extra work may not
all be removable.

When ranks are balanced, one "none" finding states the cross-rank verdict so a multi-rank report says it was checked — but only when at least
half of every rank's steady steps hold a timed collective: collectives the hook cannot see (a path it does
not wrap) leave the ranks' waiting unmeasured, and "balanced" would then be a claim nobody checked.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import CommSummary, Facts, RankComm
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import gain_from_seconds, no_trace
from gpusleuth.diagnosis.rules.host import foreign_cores

CONSISTENT = 0.60
# a thread that computes keeps a fifth of a core or more even on a crowded host (measured: 21-38 % on a
# 2-core host at load 9-14); one that sleeps, waits on storage or on its DataLoader workers ≈ 0 (0.1-0.4 %)
HOST_BUSY = 0.15
COVERED = 0.5  # at least half of every rank's steady steps hold a timed collective, or no verdict at all
MODERATE = 0.10
HIGH = 0.25

_PARTS = {
    "data_wait_s": ("its input pipeline (data wait)", "its DataLoader: more workers, faster storage, its shard size"),
    "other_s": ("compute and host work outside data loading and collectives",
                "its process: other load on its host or GPU, uneven work (sequence lengths), its clocks"),
    "compute_s": ("device compute", "its GPU: clocks and throttling (`nvidia-smi -q -d PERFORMANCE`), "
                                     "uneven work per rank"),
    "idle_host_s": ("device idle waiting on its host", "its host: CPU contention, Python overhead"),
    "idle_optimizer_cpu_s": ("optimizer work on its host", "its optimizer step"),
    "transfer_s": ("moving data in collectives", "its network path (NIC, NVLink, PCIe)"),
}


def straggler(facts: Facts) -> list[Finding] | Missing:
    comm = facts.comm
    if comm is None or len(comm.ranks) < 2:
        if facts.traces or facts.outcomes.steps.steps:  # a job seen whole, with one rank: nothing to compare
            return Missing(rule="stragglers", cause="straggler",
                           needs="two or more ranks (this job ran one process, or one rank was recorded)",
                           how="applies to multi-process jobs: `gpusleuth run -- torchrun …` records every rank",
                           data="two or more ranks")
        return no_trace("stragglers", "straggler",
                        "collectives recorded from ≥ 2 ranks (`gpusleuth run -- torchrun …`) or profiler "
                        "traces from ≥ 2 ranks of one job")
    if comm.step_coverage < COVERED:
        return Missing(
            rule="stragglers", cause="straggler",
            needs=f"collectives inside the training steps of every rank (only {comm.step_coverage:.0%} of one "
                  f"rank's steps called a collective the hook times)",
            how="either the ranks synchronize only now and then (then they seldom wait for each other), or the "
                "job's collectives go through a path the hook does not wrap (DDP's C++ reduction with a "
                "built-in comm hook or GPUSLEUTH_DDP_HOOK=0, functional collectives, a custom backend): record a profiler trace of a few steps on "
                "every rank (`gpusleuth run --profile-steps 5-8 -- torchrun …`)",
            data="collectives in the steps")
    slow = comm.rank(comm.slow_rank)
    others = [r for r in comm.ranks if r is not slow]
    step = max((r.step_s for r in comm.ranks), default=0.0)
    waited = comm.lost_per_step_s / step if step > 0 else 0.0
    share = comm.owned_per_step_s / step if step > 0 else 0.0
    source = "hook: collectives matched across ranks" if comm.matched else "profiler traces, per rank"
    if slow is None or comm.slow_caused_share < CONSISTENT or share < MODERATE:
        return [_balanced(comm, slow, waited, share, source)]
    part, why = _where(comm.slow_extra)
    busy = _cpu_busy_share(comm.slow_extra) if part == "data_wait_s" and comm.matched else None
    lost_ms = comm.owned_per_step_s * 1e3
    evidence = [
        Evidence("other ranks' wait for it", round(comm.lost_per_step_s * 1e3, 2), "ms per step", source),
        Evidence("of it, its own extra time outside collectives", round(lost_ms, 2), "ms per step", source),
        Evidence("of their step", round(share * 100, 1), "%", source),
        Evidence("its share of all waiting", round(comm.slow_caused_share * 100, 1), "%", source),
        Evidence(f"{comm.hours_unit} the others lost waiting", round(comm.lost_s / 3600, 6),
                 "GPU-h" if comm.hours_unit == "GPU-hours" else "process-h", source),
    ]
    if part is not None:
        evidence.append(Evidence(f"its extra time in {_PARTS[part][0]}", round(comm.slow_extra[part] * 1e3, 2),
                                 "ms per step vs the median rank", source))
    if busy is not None:
        evidence.append(Evidence("its main thread on a CPU during that extra time", round(busy * 100, 1), "%",
                                 "thread CPU clock from a step's end to the next forward"))
    if slow.cpu_pct is not None and others and others[0].cpu_pct is not None:
        evidence.append(Evidence("its process CPU", round(slow.cpu_pct, 1), "% of a core",
                                 "recorder process samples"))
    gain = None
    if facts.outcomes is not None:
        gain = gain_from_seconds(facts, comm.owned_per_step_s * facts.steps.steps,
                                 "the straggler runs at the other ranks' pace: their wait for it disappears")
    where = f" Its extra time goes to {_PARTS[part][0]}." if part else ""
    fix_part = _PARTS[part][1] if part else ""
    if busy is not None and busy >= HOST_BUSY:
        where = (f" Its extra time is before its forward with its main thread on a CPU {busy:.0%} of it: host work "
                 f"in its loop (batch building, preprocessing, extra computation), not storage.")
        fix_part = ("the work its loop does before each forward (move it into DataLoader workers, or give it "
                    "the same work as the other ranks)")
    elif busy is not None:
        where += (f" Its main thread was on a CPU for only {busy:.0%} of that time: it waited (for storage, its "
                  "DataLoader workers, a lock, a sleep).")
    foreign = foreign_cores(facts)
    if foreign is not None:
        # a rank that processes outside the job deschedule more falls behind for reasons outside the job:
        # the wait is real, its cause may not be the rank's code (a balanced job went HIGH on a crowded box)
        where += (f" Other processes used {foreign:.1f} cores of this host meanwhile: they may be what holds "
                  "this rank back, so measure again on a quiet host before rebalancing.")
    return [Finding(
        cause="straggler", severity="high" if share >= HIGH and foreign is None else "moderate",
        title=f"Rank {slow.rank} is a straggler: the other ranks wait {lost_ms:.1f} ms per step "
              f"({share:.0%} of a step) for its extra work",
        summary=_who(slow, comm) + _beyond(comm) + where,
        evidence=evidence,
        fix=f"Look at rank {slow.rank}" + (f": {fix_part}." if part else ".")
            + " Balance work and data shards across ranks; exclude a faulty node.",
        estimated_gain=gain,
        confidence="low" if foreign is not None else "high" if comm.matched else "medium",
    )]


def _balanced(comm: CommSummary, slow: RankComm | None, waited: float, share: float, source: str) -> Finding:
    """The cross-rank verdict when no rank holds the others back: either nobody waits much, or the rank
    they wait for does no more work than they do (the host made them take turns, see the module doc)."""
    who = f"rank {slow.rank} holds the others longest; " if slow is not None else ""
    title = f"Ranks are balanced: {who}the others wait {waited:.1%} of a step for it"
    summary = (f"{len(comm.ranks)} ranks compared collective by collective ({comm.clock}); no rank holds the "
               f"others back above {MODERATE:.0%} of a step.")
    if slow is not None and waited >= MODERATE and comm.slow_caused_share >= CONSISTENT:
        title = (f"Ranks are balanced: rank {slow.rank} arrives last and the others wait {waited:.0%} of a step, "
                 f"but its own extra work is only {share:.1%} of a step")
        summary += (f" Rank {slow.rank} arrived last at most collectives, yet outside collectives its step is "
                    f"only {comm.own_extra_s * 1e3:.2f} ms longer than the others' ({share:.1%} of a step): the "
                    f"{comm.lost_per_step_s * 1e3:.2f} ms a step they wait is not its work but the host's — "
                    "ranks that share too few free cores take turns, and the one descheduled arrives last.")
    return Finding(
        cause="straggler", severity="none", title=title, summary=summary,
        evidence=[Evidence("wait for the slowest rank", round(waited * 100, 2), "% of step", source),
                  Evidence("of it, its own extra time outside collectives", round(share * 100, 2), "% of step",
                           source),
                  Evidence("time in collectives", round(comm.comm_share * 100, 1), "% of step", source)],
        fix="Nothing to fix across ranks.", confidence="medium",
    )


def _beyond(comm: CommSummary) -> str:
    """The wait its own extra time does not account for, when that is a sizeable part: the host's."""
    rest = comm.lost_per_step_s - comm.owned_per_step_s
    if rest < 0.2 * comm.lost_per_step_s:
        return ""
    return (f" They wait {comm.lost_per_step_s * 1e3:.2f} ms a step in all; its step outside collectives is "
            f"{comm.owned_per_step_s * 1e3:.2f} ms longer than theirs, and only that is priced — the rest is the "
            "host's scheduling, which ranks that run at one pace still share.")


def _who(slow: RankComm, comm: CommSummary) -> str:
    """How the slow rank was found: arrivals matched collective by collective (hook), or — a trace has no
    arrival times — the least collective kernel time per step (the others' kernels spin waiting for it)."""
    if slow.last_share is None:
        return (f"Every collective completes only when its last rank arrives, and a rank's collective kernels "
                f"spin until then: rank {slow.rank} spends the least time in collectives per step, the others "
                f"wait for it.")
    return (f"Every collective completes only when its last rank arrives; rank {slow.rank} arrived last at "
            f"{slow.last_share:.0%} of them and caused {comm.slow_caused_share:.0%} of all waiting.")


def _cpu_busy_share(extra: dict[str, float]) -> float | None:
    """How much of the slow rank's extra input wait its main thread spent on a CPU (None: not measured)."""
    wait, cpu = extra.get("data_wait_s", 0.0), extra.get("data_cpu_s")
    if cpu is None or wait <= 0:
        return None
    return min(max(cpu / wait, 0.0), 1.0)


def _where(extra: dict[str, float]) -> tuple[str | None, str]:
    """The part of the slow rank's step that grew the most over the median rank's."""
    known = {k: v for k, v in extra.items() if k in _PARTS and v > 0}
    if not known:
        return None, ""
    part = max(known, key=lambda k: known[k])
    return part, _PARTS[part][1]
