"""Each derived fact has one home (issue 35 item 2). A fact computed twice drifts: the HTML throttle bands used
another rule than the summary (R535–R570 drivers: the chart missed throttling the summary reported), MFU picked
its own main process, the comm and input rules each had a warm-up rule of their own.

This test says where each fact lives and fails when a second function that derives it appears. It finds
derivations by name — a function whose name says it decides the fact (``*steady*``, ``*warmup*``, ``*main_pid*``,
``*throttl*``, ``*phase_time*``…) — in every stage after the sources (the recorder, the readers and the hook
record; they do not derive) and by the one sort key of the findings. A new home must be added to ``HOMES``
with its reason, or the derivation moved to the home that exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "gpusleuth"
NOT_DERIVING = ("hook", "recorder", "sources")  # record and read; the run's facts are derived after them

# fact → (what names a derivation of it, {module:function → why it is that fact's home, or not a second one})
HOMES: dict[str, tuple[str, dict[str, str]]] = {
    "warm-up and the steady steps": (r"steady|warm_?up", {
        "analysis/steps.py:warmup_count": "the home: how many first steps are warm-up, per process",
        "analysis/steps.py:steady": "the home: ProcessSteps.steady, the steps after warm-up and outside "
                                    "gpusleuth's own instruments and stalls",
        "analysis/steps.py:steady_samples_per_s": "reads ProcessSteps.steady",
        "analysis/steps.py:steady_tokens_per_s": "reads ProcessSteps.steady",
        "analysis/goodput.py:steady_state": "the loop's steady window, from the step view's main process",
        # Known second derivation, left on purpose: ranks must be compared step i with step i (lockstep
        # iterations), and the step view's warm-up is per process (rank 0 may drop 1 step, rank 1 three).
        # To go when the step view carries one job-level warm-up.
        "analysis/comm.py:_steady": "KNOWN second derivation: every rank's first step left out, for lockstep",
        "diagnosis/rules/gpu_log.py:bursty_or_steady": "a rule's name (GPU utilisation bursty or steady), not steps",
        "serving/analysis/requests.py:_without_warmup": "a load's warm-up requests, marked by the generator "
                                                        "that sent them: not training steps",
        "serving/recorder/loadgen.py:warm_up": "sends the load's warm-up requests (the recorder)",
        "serving/recorder/warmup.py:warmup_summary": "what the warm-up requests got (the recorder)",
        "serving/recorder/warmup.py:warmup_note": "says it (the recorder)",
    }),
    "the main process": (r"main_(pid|proc|process|rank)|pick_main|choose_main", {
        "run/model.py:pick_main": "the home: the process with the most steps, ranks first; the step view and "
                                  "the live tail both call it",
    }),
    "throttling (summary shares and chart bands)": (r"throttl", {
        "analysis/telemetry.py:throttle_sources": "the home: which counter or reason bit says each reason",
        "analysis/telemetry.py:_throttled": "the summary's shares, from throttle_sources",
        "diagnosis/rules/throttling.py:clock_throttling": "the rule that reads the summary's shares",
        "diagnosis/rules/host.py:cgroup_throttling": "a container's CPU throttling (cpu.stat): another fact",
    }),
    "phase time": (r"phase_(time|band|span|stat)|_phases$", {
        "analysis/phases.py:phase_time": "the home: the phases' time inside a window",
        "analysis/loop.py:phase_stats": "per-phase statistics over the main process's steps, from phase_time",
        "analysis/timeseries.py:_phases": "the chart's phase bands, drawn from the run's phase rows",
        "diagnosis/rules/phases.py:phase_time": "the rule that reads phase_stats",
    }),
}


# Facts no name gives away, found by the columns a function reads: fact → (columns read together,
# {module:function → why it is the home, or another fact})
BY_COLUMNS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    # four functions summed per-process CPU per sampling time, each with its own window (widened or not, ends
    # in or out, times counted among all samples or the set's): a 0.3 s load level read "no server CPU" in one
    # and a widened figure in another
    "cores used by a set of processes over a window": (("cpu_pct", "pid"), {
        "analysis/host_telemetry.py:cores_by_process": "the home: summed per sampling time, averaged over the "
                                                       "window's times, the window widened by samples_around",
        "analysis/host_telemetry.py:summarize_host": "each process's own CPU distribution (ProcessSummary) and "
                                                     "the main process's and workers' means: per process, not "
                                                     "a set's sum; the job's cores come from the home",
        "analysis/comm.py:_cpu_pct": "one rank's process's mean CPU: one process, not a set",
        "analysis/timeseries.py:_host": "the chart's one line per process; the workers' sum from the home",
        "report/live.py:poll": "the live view's last sampling time, from the streams being written (no Run, "
                               "no window)",
    }),
}
# GPU busy over a window: a load level's (level_telemetry.gpu_in) and a request window's (requests._gpu) each
# averaged util_gpu over their own mask; one function now
BY_COLUMNS["the accelerators' busy share over a window"] = (("util_gpu", "t_ns"), {
    "analysis/telemetry.py:gpu_busy_in": "the home: mean util_gpu of every device within [lo, hi]",
    "analysis/telemetry.py:summarize_gpus": "each GPU's distribution over the run (GpuSummary): per device",
    "analysis/gpu_timeline.py:gpu_timelines": "each GPU's idle/busy timeline: per device, per sample",
    "report/live.py:poll": "the live view's last sampling time (no Run, no window)",
})


def _functions() -> set[str]:
    found = set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel.split("/")[0] in NOT_DERIVING and rel != "run/model.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.add(f"{rel}:{node.name}")
    return found


def test_each_derived_fact_has_its_listed_homes_and_no_other():
    functions = _functions()
    for fact, (names, homes) in HOMES.items():
        deriving = {f for f in functions if re.search(names, f.split(":", 1)[1])}
        new = deriving - set(homes)
        assert not new, (f"{fact}: derived again in {sorted(new)} — use its home "
                         f"({next(h for h, why in homes.items() if why.startswith('the home'))}) or list it with why")
        gone = set(homes) - deriving
        assert not gone, f"{fact}: {sorted(gone)} no longer exist: take them off HOMES"


def test_findings_are_ranked_in_one_place():
    """The ranking decides the report's order, the top finding of summary.json and the fleet's top cause:
    one sort, in the diagnosis engine (``Finding.rank_key``); everything after reads its order."""
    users = set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "rank_key":
                users.add(rel)
    assert users == {"diagnosis/engine.py"}, users


def test_facts_found_by_the_columns_they_read_have_their_listed_homes_and_no_other():
    for fact, (columns, homes) in BY_COLUMNS.items():
        deriving = set()
        for path in sorted(PKG.rglob("*.py")):
            rel = path.relative_to(PKG).as_posix()
            if rel.split("/")[0] in NOT_DERIVING:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    read = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)}
                    if set(columns) <= read:
                        deriving.add(f"{rel}:{node.name}")
        new = deriving - set(homes)
        assert not new, (f"{fact}: derived again in {sorted(new)} — use its home "
                         f"({next(h for h, why in homes.items() if why.startswith('the home'))}) or list it with why")
        gone = set(homes) - deriving
        assert not gone, f"{fact}: {sorted(gone)} no longer exist: take them off HOMES"
