"""``gpusleuth fleet``: real recorded runs (summaries made on the fly, then cached) and generated folders
of summaries for the query semantics (filters, sorting, re-pricing)."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

import pytest

from conftest import REPO, gpusleuth, without_dac

sys.path.insert(0, str(REPO / "benchmarks"))
from fleet_scale import make_runs  # noqa: E402  (the benchmark's generator: one source of fake fleets)

pytestmark = pytest.mark.process  # starts child processes (tests/conftest.py: lanes)

pytest.importorskip("duckdb")
JOB = [sys.executable, str(REPO / "tests" / "jobs" / "phased_train.py"), "--seconds", "2"]


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fleet")
    for label, name in (("alpha", "a"), ("<b>beta</b>", "b")):
        res = gpusleuth("run", "--no-gpu", "--label", label, "--out", root / name, "--no-report",
                        "--", *JOB, timeout=300)
        assert res.returncode == 0, res.stderr
    (root / "broken").mkdir()
    (root / "broken" / "meta.json").write_text("{not json")
    return root


@pytest.mark.slow
def test_real_runs_match_their_reports_and_cache_a_summary(fleet_dir, tmp_path):
    assert not list(fleet_dir.glob("*/summary.json"))
    cache = tmp_path / "cache"
    res = gpusleuth("fleet", fleet_dir, "--json", "--price-per-gpu-hour", "2", env={"GPUSLEUTH_CACHE_DIR": str(cache)})
    assert res.returncode == 0, res.stderr
    fleet = json.loads(res.stdout)
    assert fleet["runs"] == 2
    assert any("broken" in s and "meta.json" in s for s in fleet["skipped"])  # named, not a traceback
    assert not list(fleet_dir.glob("*/summary.json"))  # reading never writes a run...
    assert len(list((cache / "summaries").glob("*.json"))) == 2  # ...the summaries are cached outside it
    res = gpusleuth("fleet", fleet_dir, "--json", "--no-analyse", env={"GPUSLEUTH_CACHE_DIR": str(cache)})
    assert json.loads(res.stdout)["runs"] == 2  # the next look reads the cache
    for row in fleet["rows"]:
        report = json.loads(gpusleuth("report", row["path"], "--json", "--price-per-gpu-hour", "2").stdout)
        o = report["outcomes"]
        assert row["goodput"] == pytest.approx(o["goodput"]["goodput"])
        assert row["steps"] == o["steps"] and row["gpus"] == 0 and row["gpu_hours"] == 0
        per_s = 2 / 3600  # a CPU-only run is priced as one machine
        assert row["cost_usd"] == pytest.approx(report["run"]["wall_s"] * per_s)
        for cause, seconds in o["goodput"]["badput_s"].items():
            if seconds:
                assert row["lost_by_cause"][cause] == pytest.approx(seconds * per_s)
        assert row["top_cause"] == report["findings"][0]["cause"]
    totals = fleet["lost_by_cause"]
    assert sum(totals.values()) == pytest.approx(sum(r["lost_usd"] for r in fleet["rows"]))
    assert list(totals.values()) == sorted(totals.values(), reverse=True)


@pytest.mark.slow
def test_outputs_csv_html_and_terminal(fleet_dir, tmp_path):
    res = gpusleuth("fleet", fleet_dir, "--csv", "--sort", "label", "--asc", "--price-per-gpu-hour", "2")
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert [r["label"] for r in rows] == ["<b>beta</b>", "alpha"]
    assert float(rows[0]["lost_usd"]) > 0
    page = tmp_path / "fleet.html"
    res = gpusleuth("fleet", fleet_dir, "--html", page, "--price-per-gpu-hour", "2")
    assert res.returncode == 0, res.stderr
    text = page.read_text()
    assert "&lt;b&gt;beta&lt;/b&gt;" in text and "<b>beta</b>" not in text  # labels are untrusted
    figures = json.loads(text.split('<script type="application/json" id="gs-figures">')[1].split("</script>")[0])
    causes = figures["fig-1"]["data"][0]["y"]
    assert "data_wait" in causes and "startup" in causes
    assert "alpha" in res.stdout and "lost by cause" in res.stdout  # the terminal table came too
    res = gpusleuth("fleet", fleet_dir, "--label", "alp*", "--json")
    assert [r["label"] for r in json.loads(res.stdout)["rows"]] == ["alpha"]


def test_generated_fleet_filters_sorts_and_reprices(tmp_path):
    base = make_runs(tmp_path, 200)
    run = lambda *a: json.loads(gpusleuth("fleet", base, "--json", "--no-analyse", *a).stdout)  # noqa: E731
    everything = run()
    assert everything["runs"] == 200 and len(everything["rows"]) == 200
    lost = [r["lost_usd"] for r in everything["rows"]]
    assert lost == sorted(lost, reverse=True)  # default: the most wasteful first
    summaries = [json.loads(p.read_text()) for p in base.glob("*/summary.json")]
    assert everything["totals"]["gpu_hours"] == pytest.approx(sum(s["gpu_hours"] for s in summaries))
    assert everything["totals"]["lost_usd"] == pytest.approx(sum(sum(s["lost_usd"].values()) for s in summaries))
    # re-priced at $1/GPU-hour: cost is exactly the GPU-hours
    cheap = run("--price-per-gpu-hour", "1", "--sort", "goodput", "--asc", "--limit", "10")
    assert cheap["runs"] == 200 and len(cheap["rows"]) == 10
    assert [r["goodput"] for r in cheap["rows"]] == sorted(r["goodput"] for r in cheap["rows"])
    assert all(r["cost_usd"] == pytest.approx(r["gpu_hours"]) for r in cheap["rows"])
    # a time window and a label glob
    starts = sorted(s["start_ns"] for s in summaries)
    from datetime import datetime, timezone

    mid = datetime.fromtimestamp(starts[100] / 1e9, timezone.utc).isoformat()
    assert run("--since", mid)["runs"] == 100 and run("--until", mid)["runs"] == 100
    assert run("--label", "job-1")["runs"] == 4 and run("--label", "job-1*")["runs"] == 44
    res = gpusleuth("fleet", base, "--since", "last tuesday")
    assert res.returncode != 0 and "a span like 36h/7d/2w" in res.stderr and "Traceback" not in res.stderr


def test_a_folder_fleet_cannot_enter_is_named_not_skipped(tmp_path):
    """Issue 23's note: a subfolder fleet could not enter (it may hold a run) was left out in silence."""
    import subprocess

    base = make_runs(tmp_path, 3)
    locked = base / "run-00001"
    locked.chmod(0)
    try:
        res = subprocess.run(without_dac([sys.executable, "-m", "gpusleuth", "fleet", str(base), "--json",
                                          "--no-analyse"]), capture_output=True, text=True, timeout=120)
        alone = subprocess.run(without_dac([sys.executable, "-m", "gpusleuth", "fleet", str(locked)]),
                               capture_output=True, text=True, timeout=120)
    finally:
        locked.chmod(0o755)
    assert res.returncode == 0, res.stderr
    fleet = json.loads(res.stdout)
    assert fleet["runs"] == 2
    assert fleet["skipped"] == [f"{locked}: cannot be entered (Permission denied); left out"]
    assert alone.returncode == 2 and "Traceback" not in alone.stderr, alone.stderr
    assert alone.stderr.strip().splitlines() == [f"gpusleuth: error: {locked}: cannot be read (Permission denied: "
                                                 "you may not enter this directory)"]


def test_imported_gpu_log_counts_its_gpu_hours(tmp_path):
    """An nvidia-smi capture has no steps, so no outcomes: its GPUs are the log's. It was a row of 0 GPUs,
    0 GPU-hours, priced as a CPU machine, beside a finding of 2.57 idle GPU-hours."""
    log = REPO / "tests" / "fixtures" / "nvidia-smi" / "plato_gpu_log_noheader.csv"
    res = gpusleuth("import", log, "--out", tmp_path / "runs" / "plato", "--tz", "UTC")
    assert res.returncode == 0, res.stderr
    res = gpusleuth("fleet", tmp_path / "runs", "--json", "--price-per-gpu-hour", "2")
    assert res.returncode == 0, res.stderr
    row = json.loads(res.stdout)["rows"][0]
    assert row["gpus"] == 1
    assert row["gpu_hours"] == pytest.approx(row["wall_s"] / 3600) and row["gpu_hours"] > 2.5
    assert row["cost_usd"] == pytest.approx(row["gpu_hours"] * 2)
    assert "GPU-hours" in row["top_finding"]


@pytest.mark.slow
def test_a_recorded_server_is_not_all_waste(tmp_path):
    """A server under ``gpusleuth load`` has requests, no training steps: its fleet row has no goodput and
    no dollars lost by cause — it showed goodput 0 % and its whole cost lost to 'other_idle'."""
    from conftest import free_port

    port = free_port()
    res = gpusleuth("load", f"http://127.0.0.1:{port}/", "--concurrency", "2", "--duration", "1", "--body-file",
                    REPO / "README.md", "--out", tmp_path / "runs" / "served", "--",
                    sys.executable, REPO / "tests" / "servers" / "http_infer.py", port, tmp_path / "truth.json",
                    timeout=300)
    assert res.returncode == 0, res.stderr
    res = gpusleuth("fleet", tmp_path / "runs", "--json", "--price-per-gpu-hour", "2")
    assert res.returncode == 0, res.stderr
    row = json.loads(res.stdout)["rows"][0]
    assert row["steps"] in (0, None) and row["cost_usd"] > 0
    assert row["goodput"] is None and not row["lost_usd"] and not row["lost_by_cause"]
