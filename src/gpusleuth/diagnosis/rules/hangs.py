"""Stalls the recorder's watch caught live (recorder/stallwatch.py): the job stopped making progress — a hang, or a
pause it recovered from. One finding per run, naming the worst stall; every stall is in the evidence.

The verdict is the analysis's (analysis/stalls.py): the rank whose main thread was not inside a collective while
the others were (or the one behind in steps), its file:line, where the others waited, how long, the
process-hours lost. HIGH when the job ended still stuck (or was ended by ``--on-stall kill``), or a stall lasted
a minute or more; MODERATE for a shorter pause it recovered from. The gain is the stall's wall time: what the
job would not have lost without it (an upper bound for a hang: the fix is the culprit's code, or a timeout).
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts, RankAt, StallVerdict
from gpusleuth.diagnosis.finding import Evidence, Finding, Gain, Missing

LONG_S = 60.0
SOURCE = "stall watch: progress per rank, stacks taken while stuck"


def _name(p: RankAt) -> str:
    return f"rank {p.rank}" if p.rank is not None else f"pid {p.pid}"


def _span(v: StallVerdict) -> str:
    if v.recovered:
        return f"stopped for {v.duration_s:.0f} s and recovered"
    if v.ended_stuck:
        ended = " (ended by --on-stall kill)" if v.action == "kill" else ""
        return f"stopped for {v.duration_s:.0f} s until the job ended, still stuck{ended}"
    return f"stopped for at least {v.duration_s:.0f} s (the recording ends there)"


def _tail(v: StallVerdict) -> Finding:
    """The job's steps stopped and it then ended by itself (exit 0): work after its loop, not a hang."""
    return Finding(
        cause="hang", severity="none",
        title=f"No step for the last {v.duration_s:.0f} s before the job ended normally: work after the loop, "
              "outside any phase",
        summary=(f"The stall watch saw no progress for {v.duration_s:.0f} s (threshold {v.threshold_s:.0f} s) and "
                 f"took every process's stacks (stalls/{v.id}/), then the job ended with exit code 0: "
                 f"{v.sentence}. Work after the training loop (an export, an upload, a final evaluation without "
                 "model.eval()) is not a hang."),
        evidence=[Evidence("time without progress before the end", round(v.duration_s, 1), "s", SOURCE),
                  Evidence("processes whose stacks were taken", v.stacks_taken, "", ", ".join(v.via) or "none")],
        fix="Nothing to fix; wrap that work in `gpusleuth.phase(\"name\")` to have it named (and not watched).",
        confidence="medium")


def hangs(facts: Facts) -> list[Finding] | Missing:
    if not facts.stalls:
        return []
    worst = max(facts.stalls, key=lambda v: (not v.recovered and not v.ended_normally, v.duration_s))
    if worst.ended_normally:
        return [_tail(worst)]
    high = not worst.recovered or worst.duration_s >= LONG_S
    lost_s = sum(v.duration_s for v in facts.stalls)
    hours = sum(v.process_hours for v in facts.stalls)
    n = len(facts.stalls)
    what = "hung" if not worst.recovered else "paused"
    head = worst.sentence if worst.how == "mismatch" else worst.sentence.split(";")[0]
    noun = "server" if worst.how == "handlers" else "job"
    title = (f"The {noun} {what}: {head} — {_span(worst)}" if worst.culprits
             else f"The job {what}: {worst.stalled_processes} process(es) {_span(worst)}")
    summary = (f"{n} stall(s) seen live (no step or phase boundary for {worst.threshold_s:.0f} s or more). "
               f"Stall {worst.id}: {worst.sentence}. {worst.stalled_processes} process(es) {_span(worst)}; "
               f"{hours:.4f} process-hours lost in all" + (" (a rank per GPU: GPU-hours)." if facts.gpus else "."))
    if worst.how == "stacks":
        summary += " The culprit's main thread was outside any collective while the others waited inside one."
    elif worst.how == "mismatch":
        summary += (" Every rank was inside a collective, but not the same one (or not from the same line): the "
                    "ranks disagree on the order of their collectives, and each waits for a partner that never comes.")
    elif worst.how == "steps":
        summary += " Told by step count (the stacks did not separate the ranks): the culprit was behind."
    elif worst.how == "handlers":
        summary += (" A server: the place named is where its threads serving requests stood (its main thread only "
                    "accepts connections); a handler waiting on a lock names the lock's line — the thread holding "
                    "it is among the stacks.")
    elif worst.how == "flight":
        summary += (" Told by torch's Flight Recorder (the stacks did not separate the ranks): the culprit's last "
                    "collective is behind the others'.")
    if worst.flight:
        summary += f" {worst.flight}."
    if worst.gpu_signature == "busy-waiting":
        summary += (f" The GPUs read {worst.gpu_util_pct:.0f} % utilization at {worst.gpu_power_share:.0%} of their "
                    "power limit meanwhile: kernels spinning in a collective, busy doing nothing.")
    elif worst.gpu_signature == "idle":
        summary += " The GPUs were idle meanwhile: a host-side stall."
    evidence = [
        Evidence("stalls", n, "", SOURCE),
        Evidence("longest stall", round(worst.duration_s, 1), "s", SOURCE),
        Evidence("wall time stopped, all stalls", round(lost_s, 1), "s", SOURCE),
        Evidence("process-hours lost", round(hours, 6), "process-h", SOURCE),
        Evidence("threshold", round(worst.threshold_s, 1), "s", SOURCE),
        Evidence("processes whose stacks were taken", worst.stacks_taken, "", ", ".join(worst.via) or "none"),
    ]
    if worst.stacks_failed:
        evidence.append(Evidence("processes whose stacks could not be taken", worst.stacks_failed, "", SOURCE))
    for c in worst.culprits:
        evidence.append(Evidence(f"{_name(c)} (culprit) at", c.where or "unknown", "", c.via or SOURCE))
        if c.handlers:
            evidence.append(Evidence(f"{_name(c)}'s request handlers at", ", ".join(
                f"{w} ({n} thread{'s' if n > 1 else ''})" for w, n in c.handlers[:6]), "", c.via or SOURCE))
    for w in worst.waiting:
        evidence.append(Evidence(f"{_name(w)} waits in {w.collective or 'its step'} at", w.where or "unknown", "",
                                 w.via or SOURCE))
    if worst.flight:
        evidence.append(Evidence("flight recorder", worst.flight.removeprefix("Flight Recorder: "), "",
                                 "torch Flight Recorder"))
    if worst.gpu_util_pct is not None:
        evidence.append(Evidence("GPU utilization during the stall", round(worst.gpu_util_pct, 1), "%", "NVML"))
    if worst.gpu_power_share is not None:
        evidence.append(Evidence("GPU power during the stall", round(worst.gpu_power_share * 100, 1),
                                 "% of the power limit", "NVML"))
    for v in facts.stalls:
        if v is not worst:
            evidence.append(Evidence(f"stall {v.id}", round(v.duration_s, 1), "s",
                                     "recovered" if v.recovered else "did not recover"))
    culprit = ", ".join(f"{_name(c)} at {c.where}" for c in worst.culprits if c.where)
    sure = worst.how in ("stacks", "mismatch", "flight")
    if worst.how == "handlers":
        fix = (f"Read the stacks in the run directory's stalls/{worst.id}/ (every thread of the server)"
               + (f"; start at {culprit}" if culprit else "") + ": what the request handlers wait on there (a "
               "lock, a model thread, a queue, an upstream call) is held by another thread of the stacks. Bound "
               "the wait (a timeout on the lock or queue) so that a stuck model fails requests instead of "
               "holding every one.")
        sure = all(len(c.handlers) == 1 for c in worst.culprits)  # one place: the handlers' own stop
    else:
        fix = (f"Read the stacks in the run directory's stalls/{worst.id}/ (every process, all threads)"
               + (f"; start at {culprit}" if culprit else "") + ". A rank outside the collective the others wait "
               "in is held by its own code (a lock, I/O, a data loader, an uneven branch that skips a collective). "
               "Set a collective timeout that ends a hung job instead of burning hours (`init_process_group("
               "timeout=…)`, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC), or `gpusleuth run --on-stall kill`.")
    return [Finding(cause="hang", severity="high" if high else "moderate", title=title, summary=summary,
                    evidence=evidence, fix=fix, estimated_gain=_gain(facts, lost_s),
                    confidence="high" if sure else "medium")]

def _gain(facts: Facts, lost_s: float) -> Gain | None:
    """The stalls' wall time, against the run's wall time — not the loop's: a hang that ends the job (or is
    ended) lies after the last step, where the loop's span would price 15 s stuck as a 1000x speed-up."""
    wall = facts.outcomes.wall_s if facts.outcomes is not None else None
    if not wall:
        return None
    saved = min(lost_s, wall * 0.999)
    return Gain(step_share=0.0, wall_share=saved / wall, seconds_per_run=saved, speedup=wall / (wall - saved),
                method="the job does not stand still: the stalls' wall time comes back (for a hang, an upper "
                       "bound: the culprit's fix, or a timeout that ends the job sooner)",
                dollars_per_run=saved * facts.dollars_per_second if facts.dollars_per_second is not None else None)
