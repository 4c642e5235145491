"""Build a Report from Runs: analysis → facts → diagnosis → Report."""

from __future__ import annotations

from typing import Callable

from gpusleuth.analysis.outcomes import compute_outcomes
from gpusleuth.analysis.telemetry import summarize_gpus, summarize_host
from gpusleuth.diagnosis.engine import diagnose
from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.gather import extra_facts
from gpusleuth.analysis.comm import price as price_comm, trace_comm_summary
from gpusleuth.diagnosis.rules.stragglers import verdict as straggler_verdict
from gpusleuth.report.headline import compute_headline, price_findings
from gpusleuth.report.model import Report, RunInfo
from gpusleuth.report.timeseries import build_display
from gpusleuth.report.options import ReportOptions
from gpusleuth.run.model import Run


def _run_info(run: Run) -> RunInfo:
    m = run.meta
    rec = m.get("recorder") or {}
    hardware = {"gpus": rec.get("gpu") or [], "host": rec.get("host") or {}}
    if m.get("device"):
        hardware["device"] = m.get("device")
    return RunInfo(
        label=run.label,
        path=str(run.path) if run.path else m.get("trace_path"),
        source=str(m.get("source") or "recorder"),
        command=m.get("command"),
        exit_code=m.get("exit_code"),
        signal=m.get("signal"),
        stopped_by=m.get("stopped_by"),
        wall_s=run.wall_s,
        start_ns=run.start_ns,
        end_ns=run.end_ns,
        hardware=hardware,
    )


def build_report(run: Run, options: ReportOptions | None = None) -> Report:
    """Report for a recorded run (with its --profile-steps traces, if any)."""
    options = (options or ReportOptions()).merged_with(run.meta.get("report_options"))
    outcomes = compute_outcomes(run)
    gpus = summarize_gpus(run)
    main_pid = outcomes.steps.pid
    window = None
    if len(run.steps) and main_pid is not None:
        sel = run.steps["pid"] == main_pid
        window = (int(run.steps["start_ns"][sel].min()), int(run.steps["end_ns"][sel].max()))
    host = summarize_host(run, main_pid, window)
    rec = run.meta.get("recorder") or {}
    gpu_note = None if gpus else (rec.get("gpu_note") or "no GPU telemetry in this run")
    ranks = []
    losses = list(run.losses)
    for prof in run.profiles:
        ranks.append(_analyze_trace(prof))
        losses.extend(f"{prof.label}: {msg}" for msg in prof.losses)
    facts = Facts(
        outcomes=outcomes,
        gpus=gpus,
        host=host,
        gpu_note=gpu_note,
        dataloaders=[i for i in run.infos if i.get("kind") == "dataloader"],
        logical_cores=(rec.get("host") or {}).get("logical_cores"),
        **extra_facts(run, outcomes, host, ranks),  # issue 4: phases, loop span, threads, traces, host ops
    )
    findings, missing = diagnose(facts)
    headline = compute_headline(run, outcomes, gpus, options)
    price_findings(findings, headline.cost)
    price_comm(facts.comm, headline.cost.price.per_gpu_hour if headline.cost else None)
    return Report(
        run=_run_info(run), outcomes=outcomes, gpus=gpus, gpu_note=gpu_note, host=host,
        findings=findings, not_evaluated=missing, losses=losses, ranks=ranks, headline=headline,
        display=build_display(run, ranks, main_pid), comm=facts.comm,
    )


def build_trace_report(runs: list[Run], progress: Callable[[int, int], None] | None = None) -> Report:
    """Report for profiler traces read directly (one Run per rank); ``progress(done, total)`` after each
    rank's analysis, so many ranks show progress on a terminal."""
    first = runs[0]
    losses = []
    for r in runs:
        losses.extend(f"{r.label}: {msg}" if len(runs) > 1 else msg for msg in r.losses)
    info = _run_info(first)
    if len(runs) > 1:
        info.label = f"{len(runs)} traces"
    ranks = []
    for i, r in enumerate(runs):
        ranks.append(_analyze_trace(r))
        if progress is not None:
            progress(i + 1, len(runs))
    comm = trace_comm_summary(ranks)  # the ranks compared with each other: who waited for whom
    findings = straggler_verdict(comm)
    return Report(
        run=info, outcomes=None, gpus=[], gpu_note=None, host=None, findings=findings, not_evaluated=[],
        losses=losses, ranks=ranks, display=build_display(None, ranks), comm=comm,
    )


def _analyze_trace(run: Run):
    from gpusleuth.analysis.trace import analyze_trace

    return analyze_trace(run)
