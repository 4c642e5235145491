"""What ``gpusleuth report`` pays for is what it prints (issue 22, report time): no chart data without a page
to draw it on, no exposition-format parser imported for a run that has no engine scrapes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpusleuth.cli.main import main

RUN = Path(__file__).parent / "fixtures" / "rundir" / "phased"


@pytest.mark.unit
def test_report_without_a_page_builds_no_chart_data(monkeypatch, capsys, tmp_path):
    import gpusleuth.analysis.bundle as bundle

    calls = []
    real = bundle.build_display
    monkeypatch.setattr(bundle, "build_display", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert main(["report", str(RUN), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outcomes"]["steps"] == 104
    assert main(["report", str(RUN)]) == 0
    assert calls == []  # the terminal and the JSON draw no chart
    assert main(["report", str(RUN), "--html", str(tmp_path / "r.html"), "--json"]) == 0
    assert calls == [1] and "Plotly" in (tmp_path / "r.html").read_text()


@pytest.mark.process
def test_reading_a_run_directory_imports_no_prometheus_client():
    """serving/sources/engine_metrics.py imported prometheus_client (with http.server, wsgiref, email: 57 modules)
    for every run directory read; only a `gpusleuth load` run with engine scrapes needs its parser."""
    code = ("import sys; from gpusleuth.sources.inputs import read_inputs; "
            f"read_inputs([{str(RUN)!r}]); print(sorted(m for m in sys.modules if m.startswith('prometheus_client')))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
