"""The trace engine through the real CLI (a child process) and the console renderer."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from gpusleuth.analysis.trace import analyze_trace
from gpusleuth.render.trace_console import render_trace
from gpusleuth.sources.kineto import load_traces

HTA = Path(__file__).parent / "fixtures" / "hta"
FIX = Path(__file__).parent / "fixtures" / "traces"
NS = HTA / "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpusleuth", "report", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.process
def test_report_json_has_ranks_with_step_partition():
    r = cli(str(HTA / "trace_filter/sampled_rank-0.json.gz"), str(HTA / "trace_filter/sampled_rank-1.json.gz"),
            "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    ranks = doc["ranks"]
    assert [x["rank"] for x in ranks] == [0, 1]
    for x in ranks:
        assert {"device_span_s", "compute", "non_compute", "idle", "steps", "issues"} <= set(x)
        for s in x["steps"]:
            assert sum(s["partition"].values()) == pytest.approx(s["duration_s"], abs=1e-9)
    assert ranks[0]["idle"] == pytest.approx(0.5521, abs=1e-4)


@pytest.mark.process
def test_report_console_prints_partition_and_idle_causes():
    r = cli(str(NS))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "Exposed time per step" in out and "Idle causes" in out and "Top kernels" in out
    assert "#105" in out


@pytest.mark.process
def test_report_bad_input_is_one_line_not_a_traceback():
    r = cli(str(FIX / "not_json.json"))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert "not_json.json" in r.stderr and "not a format gpusleuth reads" in r.stderr
    assert r.stderr.count("\n") == 1


@pytest.mark.process
def test_report_truncated_trace_states_the_loss(tmp_path):
    import gzip

    text = gzip.decompress(NS.read_bytes())
    p = tmp_path / "cut.json"
    p.write_bytes(text[: len(text) // 2])
    r = cli(str(p), "--json")
    assert r.returncode == 0, r.stderr
    assert "salvaged" in json.dumps(json.loads(r.stdout))


def test_renderer_escapes_trace_strings_and_shows_issues():
    run = load_traces([FIX / "overlapping_kernels.json"])[0]
    a = analyze_trace(run)
    a.kernels.top[0] = replace(a.kernels.top[0], name="evil[bold red]kernel[/]")
    con = Console(record=True, width=160)
    render_trace(a, con)
    text = con.export_text()
    assert "evil[bold red]kernel[/]" in text
    assert "Data issues" in text and "same stream" in text
    assert "Exposed time per step" in text


@pytest.mark.process
def test_console_script_reads_a_ns_trace():
    import shutil

    exe = shutil.which("gpusleuth")
    if exe is None:
        pytest.skip("gpusleuth console script not on PATH")
    r = subprocess.run([exe, "report", str(NS), "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rank = json.loads(r.stdout)["ranks"][0]
    assert rank["compute"] == pytest.approx(0.9753, abs=1e-4)
    assert [s["step"] for s in rank["steps"]] == [101, 102, 103, 104, 105]
