"""A CPU-only profiler trace of a real script says what the host did (issue 27, defects 8 and 11).

After `--profile-steps` on a CPU machine the report said "6 checks need a profiler trace — record with
`--profile-steps`", printed "Device span 0.00 ms", and called the aten computation of each step "idle:
host-bound (Python/framework)" (an HF Trainer step of 44.6 ms: 37.65 ms "idle"). The trace is pytorch/
examples imagenet ResNet-18 (tests/fixtures/field_traces/README.md)."""

from __future__ import annotations

import json

from conftest import FIXTURES, gpusleuth

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
        assert sum(s["partition"].values()) == __import__("pytest").approx(s["duration_s"], rel=1e-6)
        assert s["partition"]["idle_host"] > 0.7 * s["duration_s"]


def test_findings_under_numbered_sections_carry_their_rank_not_a_list_number():
    """ "6. Runtime …" then "1. MODERATE …" read as the section's first item; the rank is "#1" (defect 10)."""
    out = gpusleuth("report", str(FIXTURES / "field_traces" / "python_loop_planted.pt.trace.json.gz")).stdout
    section = out[out.index("6. Runtime"):]
    first = section.splitlines()[1]
    assert first.lstrip().startswith("#1 ") and "host.python" in first, first
    assert "\n  1. " not in section.split("Not evaluated")[0]
