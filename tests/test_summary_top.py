"""summary.json's top finding is the report's first (its ranking: severity, then gain), never a re-ranking."""

from __future__ import annotations

from gpusleuth.analysis.identity import RunInfo
from gpusleuth.diagnosis.finding import Finding, Gain
from gpusleuth.report.model import Report
from gpusleuth.report.summary import summarize


def _finding(cause: str, severity: str, seconds: float) -> Finding:
    return Finding(cause=cause, severity=severity, title=cause, summary="", evidence=[], fix="",
                   estimated_gain=Gain(step_share=0.1, wall_share=seconds / 100, seconds_per_run=seconds,
                                       speedup=1.1, method=""))


def test_the_summary_names_the_reports_top_finding():
    high_small = _finding("input.preprocessing", "high", 5.0)
    moderate_large = _finding("phase.eval", "moderate", 30.0)
    findings = sorted([moderate_large, high_small], key=lambda f: f.rank_key)  # the engine's ranking
    assert findings[0] is high_small
    info = RunInfo(label="r", path=None, source="recording", command=None, exit_code=0, signal=None,
                   stopped_by=None, wall_s=100.0, start_ns=1, end_ns=2, hardware={})
    report = Report(run=info, outcomes=None, gpus=[], gpu_note=None, host=None, findings=findings,
                    not_evaluated=[], losses=[])
    s = summarize(report)
    assert s.top_cause == "input.preprocessing" and s.top_severity == "high" and s.top_gain_s == 5.0
