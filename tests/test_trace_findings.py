"""A profiler trace read on its own gets the same diagnosis as a recording: every rule its data supports
runs, findings carry gains in seconds of the traced steps, and what needs other data is said once per
missing source. Real traces from HTA's test data (tests/fixtures/hta, MIT)."""

from __future__ import annotations

import json

import pytest

from conftest import TRACES, gpusleuth

DF = TRACES / "df_index_resolver" / "df_index_resolver.json.gz"  # V100, DDP rank 1 of 2, fp32 sgemm, NCCL
NS = TRACES / "ns_resolution_trace" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"  # V100 CNN, fp32
NQ = TRACES / "negative_queue_length_values_check" / "rank0.json.gz"  # A100, fp16/tensor cores, all-to-all
PAIR = [TRACES / "trace_filter" / "sampled_rank-0.json.gz", TRACES / "trace_filter" / "sampled_rank-1.json.gz"]


def _report(*paths, extra=()):
    res = gpusleuth("report", *paths, "--json", *extra)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _by_cause(d):
    return {f["cause"]: f for f in d["findings"]}


@pytest.fixture(scope="module")
def df():
    return _report(DF)


def test_v100_ddp_trace_alone_gets_precision_and_communication_findings_with_gains(df):
    f = _by_cause(df)
    assert {"precision", "communication"} <= set(f)
    for cause in ("precision", "communication"):
        g = f[cause]["estimated_gain"]
        assert 0 < g["seconds_per_run"] < 1.73  # seconds of the 5 traced steps (~1.73 s in all)
        assert 1.0 < g["speedup"] < 2.0
        assert g["dollars_per_run"] is not None and g["dollars_per_run"] > 0  # V100 at the dated table price
    assert "fp32" in f["precision"]["title"] and "100%" in f["precision"]["title"]
    assert f["communication"]["evidence"][0]["value"] == pytest.approx(20.6, abs=1.0)


def test_host_time_between_ops_that_no_loop_issues_is_not_python_loop_overhead(df):
    """77 % of this DDP rank's step is host time outside ops, but almost none of it precedes the calls of a
    repeated op: it is not a Python loop a rewrite removes (issue 27), so no host.python finding — it had
    "×1.50, vectorize your loops" while a loop rewrite could remove 12 % of the step at most."""
    from gpusleuth.analysis.host_ops import host_op_stats
    from gpusleuth.sources.kineto import load_trace

    st = host_op_stats(load_trace(DF))
    assert st.python_share > 0.7 and st.loop_python_share < 0.05
    assert st.removable_share < 0.15
    assert "host.python" not in _by_cause(df)


@pytest.mark.process
def test_rules_stay_quiet_where_the_trace_shows_nothing():
    nq = _by_cause(_report(NQ))
    assert "precision" not in nq  # fp16 tensor-core GEMMs
    assert "host.python" not in nq
    ns = _by_cause(_report(NS))
    assert set(ns) == {"precision"} and ns["precision"]["severity"] == "high"


@pytest.mark.process
def test_not_evaluated_is_one_line_per_missing_data_source(df):
    summary = {g["data"]: g for g in df["not_evaluated_summary"]}
    assert len(summary["GPU telemetry"]["rules"]) >= 5
    assert sum(len(g["rules"]) for g in df["not_evaluated_summary"]) == len(df["not_evaluated"])
    console = gpusleuth("report", DF).stdout
    assert "checks need GPU telemetry" in console
    assert console.index("Findings") < console.index("Exposed time per step")  # findings first
    verbose = gpusleuth("report", DF, "--verbose").stdout
    assert "memory headroom / batch size: needs GPU telemetry" in verbose


@pytest.mark.process
def test_two_rank_trace_set_is_one_job_with_a_cross_rank_check():
    d = _report(*PAIR)
    assert d["run"]["label"] == "2 traces"
    assert len(d["ranks"]) == 2
    assert "stragglers" not in [m["rule"] for m in d["not_evaluated"]]
    assert {f["cause"] for f in d["findings"]} >= {"communication"}


@pytest.mark.process
def test_a_price_prices_every_gain(df):
    d = _report(DF, extra=("--price-per-gpu-hour", "36"))  # $36/h = 1 cent per second for one rank
    for f in d["findings"]:
        g = f["estimated_gain"]
        if g:
            assert g["dollars_per_run"] == pytest.approx(g["seconds_per_run"] * 0.01, rel=1e-6)
