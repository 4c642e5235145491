"""Assemble a Report from an analysis: build_facts → diagnose → Report.

The Run stays behind in the analysis (``pipeline/build.py`` turns a Run into its :class:`RunAnalysis`);
everything here reads the analysis alone.
"""

from __future__ import annotations

from gpusleuth.analysis.bundle import RunAnalysis
from gpusleuth.diagnosis.engine import diagnose, not_applicable
from gpusleuth.diagnosis.gather import build_facts
from gpusleuth.report.model import Report, group_missing
from gpusleuth.serving.report import serving_section


def report_from(a: RunAnalysis) -> Report:
    """Diagnose an analysis and assemble its Report (with the chart data, when the analysis built it)."""
    facts = build_facts(a)
    findings, missing = diagnose(facts)
    missing, inapplicable, why = not_applicable(facts, missing)
    return Report(
        run=a.info, outcomes=a.outcomes, gpus=a.gpus, gpu_note=a.gpu_note, host=a.host,
        findings=findings, not_evaluated=missing, losses=a.losses, ranks=a.traces, headline=a.headline,
        display=a.display,
        missing_summary=group_missing(missing), comm=a.comm, serving=serving_section(a.load),
        requests=a.requests, gpu_scope=a.gpu_scope,
        engine=a.engine, not_applicable=inapplicable, not_applicable_why=why,
    )
