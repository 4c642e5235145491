"""A run in one small flat record: what trackers log and what ``gpusleuth fleet`` tabulates.

Why a separate, flat summary: an experiment tracker wants a few scalars and tags, not the nested report;
and a fleet of 10,000 runs must not re-run every analysis to draw one table. So every recorded run directory
carries ``summary.json``, and ``fleet`` reads those with DuckDB, computing one only for runs that have none yet.

This module only makes the record; files are elsewhere (reading never writes a run): the verbs that record
runs leave ``summary.json`` in the run directory (``recorder/summary.py``); ``sources/summaries.py`` reads it,
and keeps the summaries ``fleet`` computes for runs without one in a cache outside the run.

Built from the Report's JSON form (docs/report-json.md), the versioned contract, so it keeps working while
the report's internals move. Dollars lost by cause are the badput seconds at the run's price per second of
wall time (``cost.per_recoverable_second``, all GPUs); without a price they are absent, never zero.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from gpusleuth.diagnosis.taxonomy import Severity
from gpusleuth.report.model import Report

SCHEMA = "gpusleuth.summary/1"


@dataclass
class RunSummary:
    label: str
    path: str | None
    command: str | None
    hostname: str | None
    start_ns: int | None
    end_ns: int | None
    wall_s: float | None
    exit_code: int | None
    gpus: int
    gpu_model: str | None
    gpu_hours: float | None
    steps: int | None
    samples_per_s: float | None
    step_time_p50_s: float | None
    goodput: float | None
    mfu: float | None
    energy_j: float | None
    price_per_gpu_hour: float | None
    cost_usd: float | None
    usd_per_second: float | None  # one second of this run's wall time, all GPUs, at its price
    badput_s: dict[str, float] = field(default_factory=dict)
    lost_usd: dict[str, float] = field(default_factory=dict)  # by badput cause; empty without a price
    findings: int = 0
    top_finding: str | None = None
    top_cause: str | None = None
    top_severity: Severity | None = None
    top_gain_s: float | None = None
    top_gain_usd: float | None = None
    schema: str = SCHEMA

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _get(d: Any, *keys: str, default: Any = None) -> Any:
    """``d[keys[0]][keys[1]]…`` of a JSON document, or ``default`` where a level is missing or not an object."""
    for k in keys:
        if not isinstance(d, dict):
            return default
        d = d.get(k)
    return default if d is None else d


def _gpus(d: dict[str, Any], o: dict[str, Any]) -> tuple[int, str | None]:
    """GPUs the run held and their model: the ones the job used (``outcomes``), else — a telemetry log
    without steps (an imported nvidia-smi or DCGM capture) — every GPU the log has: the capture is of them,
    and their idle hours are what a fleet is looking for. 0 on a CPU-only run: no GPU-hours, though it may
    have a price."""
    if o.get("gpus_used"):
        return int(o["gpus_used"]), o.get("gpu_model")
    telemetry = [g for g in (d.get("gpu") or []) if isinstance(g, dict)] if not o else []
    names = [g.get("name") for g in telemetry if g.get("name")]
    return len(telemetry), (names[0] if names and len(set(names)) == 1 else None)


def summarize(report: Report, meta: Mapping[str, Any] | None = None) -> RunSummary:
    """The summary of a built Report (``meta``: the run's meta.json, for the host name)."""
    d = report.to_dict()
    run, o = d["run"], d.get("outcomes") or {}
    cost = o.get("cost") or {}
    gpus, gpu_model = _gpus(d, o)
    wall = run.get("wall_s")
    per_second = cost.get("per_recoverable_second")
    # a server's recording (requests, no training steps) has no goodput: its wall time is not "idle"
    server = bool(d.get("serving") or d.get("request_stages")) and not o.get("steps")
    badput = {} if server else {k: float(v) for k, v in (_get(o, "goodput", "badput_s", default={}) or {}).items()
                                if v}
    # the report's own order is the ranking (severity, then gain: diagnosis/engine.py): re-sorting by seconds
    # here named a moderate finding with a larger gain as the top of a run whose report led with a HIGH one
    ranked = d.get("findings") or []
    top = ranked[0] if ranked else {}
    command = run.get("command")
    return RunSummary(
        label=str(run.get("label") or ""),
        path=run.get("path"),
        command=" ".join(map(str, command)) if command else None,
        hostname=(meta or {}).get("hostname"),
        start_ns=run.get("start_ns"),
        end_ns=run.get("end_ns"),
        wall_s=wall,
        exit_code=run.get("exit_code"),
        gpus=gpus,
        gpu_model=gpu_model,
        gpu_hours=gpus * wall / 3600 if wall is not None else None,
        steps=o.get("steps"),
        samples_per_s=_get(o, "throughput", "samples_per_s", default=o.get("samples_per_s")),
        step_time_p50_s=_get(o, "throughput", "step_time_p50_s", default=o.get("step_time_p50_s")),
        goodput=None if server else _get(o, "goodput", "goodput"),
        mfu=_get(o, "mfu", "mfu"),
        energy_j=_get(o, "energy", "run_j"),
        price_per_gpu_hour=_get(cost, "price", "per_gpu_hour"),
        cost_usd=cost.get("per_run"),
        usd_per_second=per_second,
        badput_s=badput,
        lost_usd={k: v * per_second for k, v in badput.items()} if per_second else {},
        findings=len(ranked),
        top_finding=top.get("title"),
        top_cause=top.get("cause"),
        top_severity=top.get("severity"),
        top_gain_s=_get(top, "estimated_gain", "seconds_per_run"),
        top_gain_usd=_get(top, "estimated_gain", "dollars_per_run"),
    )
