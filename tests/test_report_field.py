"""What the report shows of real recordings and traces (issue 27, defects 7, 8, 10, 11).

A CPU-only profiler trace of a real script says what the host did (defects 8 and 11).

After `--profile-steps` on a CPU machine the report said "6 checks need a profiler trace — record with
`--profile-steps`", printed "Device span 0.00 ms", and called the aten computation of each step "idle:
host-bound (Python/framework)" (an HF Trainer step of 44.6 ms: 37.65 ms "idle"). The trace is pytorch/
examples imagenet ResNet-18 (tests/fixtures/field_traces/README.md)."""

from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, gpusleuth

pytestmark = pytest.mark.process  # runs the CLI in child processes (tests/conftest.py: lanes)

TRACE = FIXTURES / "field_traces" / "imagenet_resnet18.pt.trace.json.gz"
WRONG = ("Device span 0.00", "idle: host-bound", "checks need a profiler trace", "Data issues",
         "device analyses are empty")


def test_console_says_the_steps_are_host_computation():
    res = gpusleuth("report", str(TRACE))
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for w in WRONG:
        assert w not in out, w
    assert "CPU-only trace" in out and "CPU ops (the computation" in out
    assert "need a GPU profiler trace" in out  # what it lacks, and where to get it


def test_html_and_json_say_the_same(tmp_path):
    html = tmp_path / "r.html"
    res = gpusleuth("report", str(TRACE), "--html", str(html))
    assert res.returncode == 0, res.stderr
    page = html.read_text()
    for w in WRONG:
        assert w not in page, w
    assert "CPU-only trace" in page and "CPU ops (the computation" in page
    d = json.loads(gpusleuth("report", str(TRACE), "--json").stdout)
    (rank,) = d["ranks"]
    assert rank["cpu_only"] is True and rank["issues"] == []
    # the host partition sums to the step, and most of a ResNet-18 step is inside ops
    for s in rank["steps"]:
        assert sum(s["partition"].values()) == pytest.approx(s["duration_s"], rel=1e-6)
        assert s["partition"]["idle_host"] > 0.7 * s["duration_s"]


def test_findings_under_numbered_sections_carry_their_rank_not_a_list_number():
    """ "6. Runtime …" then "1. MODERATE …" read as the section's first item; the rank is "#1" (defect 10)."""
    out = gpusleuth("report", str(FIXTURES / "field_traces" / "python_loop_planted.pt.trace.json.gz")).stdout
    section = out[out.index("6. Runtime"):]
    first = section.splitlines()[1]
    assert first.lstrip().startswith("#1 ") and "host.python" in first, first
    assert "\n  1. " not in section.split("Not evaluated")[0]


def test_per_core_heatmap_spans_the_recorded_run(monkeypatch):
    """Defect 7: the per-core CPU heatmap's buckets cover the run from its first host sample to its last,
    every bucket with a time (equal-count buckets padded to the column count left the last ones null: a
    92 s run's heatmap ended at 53 s). A real recording (tests/fixtures/rundir/finished, 76 host samples),
    bucketed into 30 columns as a long run is into 800."""
    import numpy as np

    import gpusleuth.analysis.timeseries as ts
    from gpusleuth.analysis.steps import step_view
    from gpusleuth.analysis.host_telemetry import assign_roles
    from gpusleuth.sources.rundir import load_run

    run = load_run(FIXTURES / "rundir" / "finished")
    monkeypatch.setattr(ts, "HEATMAP_COLUMNS", 30)
    view = step_view(run)
    (hm,) = ts.build_display(run, [], view, assign_roles(run, view.pid)).heatmaps
    t_host = (run.host["t_ns"].astype(np.int64) - int(run.start_ns)) / 1e9
    assert len(hm.t) == 30 and None not in hm.t and all(np.diff(hm.t) > 0)
    width = (t_host.max() - t_host.min()) / 30
    assert hm.t[0] == pytest.approx(t_host.min() + width / 2, abs=1e-3)
    assert hm.t[-1] == pytest.approx(t_host.max() - width / 2, abs=1e-3)
    # each bucket's mean is the mean of the samples in its time range
    m = ts._per_core(run)
    first = (t_host >= t_host.min()) & (t_host < t_host.min() + width)
    assert hm.z[0][0] == pytest.approx(float(np.nanmean(m[0][first])), abs=0.01)


def test_a_capture_too_small_to_judge_says_what_the_device_did_and_is_not_healthy():
    """Defect 9: a 3-op Nsight capture was "healthy — no bottleneck" beside "too little to judge". Now it is
    not judged, with the device's own split of its span (checked against the export's own tables)."""
    import sqlite3

    path = FIXTURES / "nsys" / "mock.sqlite"
    d = json.loads(gpusleuth("report", str(path), "--json").stdout)
    causes = [f["cause"] for f in d["findings"]]
    assert "healthy" not in causes and causes == ["not_judged"]
    (f,) = d["findings"]
    ev = {e["name"]: e["value"] for e in f["evidence"]}
    con = sqlite3.connect(path)
    k = con.execute("select min(start), max(end), sum(end - start) from CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    m = con.execute("select min(start), max(end) from CUPTI_ACTIVITY_KIND_MEMCPY").fetchone()
    span = max(k[1], m[1] or 0) - min(k[0], m[0] or k[0])
    assert ev["device span"] == pytest.approx(span / 1e6, rel=1e-3)
    assert "too little to judge" in " ".join(d["losses"]) and "No finding is ranked" in f["summary"]


def test_copies_that_dominate_a_small_capture_are_still_named():
    """The 4-iteration vector add (91 % of its device span is copies) keeps its copy-bound finding: it is
    judged on the whole capture, and not_judged never hides a finding."""
    d = json.loads(gpusleuth("report", str(FIXTURES / "nsys" / "rtx4060ti_vecadd_copies.sqlite"), "--json").stdout)
    causes = [f["cause"] for f in d["findings"]]
    assert causes[0] == "input.transfer" and "not_judged" not in causes and "healthy" not in causes
