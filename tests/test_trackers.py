"""``gpusleuth report RUN --mlflow URI / --wandb PROJECT`` on a real recorded CPU torch run.

The MLflow half reads back a real file store with MLflow's own client; the W&B half runs W&B in offline
mode (no network, no account) and reads the records of its ``.wandb`` file (W&B's LevelDB-style log of
protobuf records) back with W&B's own protobuf classes. Both must carry the numbers the report's JSON
gives for the same run.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

from conftest import REPO, gpusleuth

pytestmark = pytest.mark.slow
JOB = [sys.executable, str(REPO / "tests" / "jobs" / "phased_train.py"), "--seconds", "3"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, dict]:
    run_dir = tmp_path_factory.mktemp("trackers") / "run"
    at_run = run_dir.parent / "mlruns-at-run"  # `run --mlflow` logs as soon as the job ends
    res = gpusleuth("run", "--no-gpu", "--label", "tracked", "--out", run_dir, "--no-report",
                    "--mlflow", at_run.as_uri(), "--price-per-gpu-hour", "3", "--", *JOB, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "logged to MLflow" in res.stderr
    res = gpusleuth("report", run_dir, "--json", "--price-per-gpu-hour", "3")
    assert res.returncode == 0, res.stderr
    return run_dir, json.loads(res.stdout)


def test_mlflow_file_store_gets_headline_findings_and_report(recorded, tmp_path):
    mlflow = pytest.importorskip("mlflow")
    run_dir, report = recorded
    store = tmp_path / "mlruns"
    res = gpusleuth("report", run_dir, "--mlflow", store.as_uri(), "--price-per-gpu-hour", "3")
    assert res.returncode == 0, res.stderr
    assert "logged to MLflow" in res.stderr

    import os

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    client = mlflow.tracking.MlflowClient(tracking_uri=store.as_uri())
    exp = client.get_experiment_by_name("gpusleuth")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_name == "tracked" and run.info.status == "FINISHED"
    m, o = run.data.metrics, report["outcomes"]
    assert m["gpusleuth/goodput"] == pytest.approx(o["goodput"]["goodput"])
    assert m["gpusleuth/samples_per_s"] == pytest.approx(o["throughput"]["samples_per_s"])
    assert m["gpusleuth/cost_usd"] == pytest.approx(o["cost"]["per_run"])
    assert m["gpusleuth/steps"] == o["steps"]
    for cause, seconds in o["goodput"]["badput_s"].items():
        if seconds:
            assert m[f"gpusleuth/badput_s.{cause}"] == pytest.approx(seconds)
            assert m[f"gpusleuth/lost_usd.{cause}"] == pytest.approx(seconds * o["cost"]["per_recoverable_second"])
    top = report["findings"][0]
    assert run.data.tags["gpusleuth.finding.1.cause"] == top["cause"] == "input.io"
    assert run.data.tags["gpusleuth.finding.1.severity"] == top["severity"]
    assert run.data.params["gpusleuth.label"] == "tracked"
    names = {a.path for a in client.list_artifacts(run.info.run_id, "gpusleuth")}
    assert names == {"gpusleuth/gpusleuth-report.html", "gpusleuth/gpusleuth-report.json"}
    local = Path(client.download_artifacts(run.info.run_id, "gpusleuth/gpusleuth-report.json", str(tmp_path)))
    assert json.loads(local.read_text())["findings"][0]["cause"] == "input.io"


def test_run_logs_to_mlflow_when_the_job_ends(recorded):
    mlflow = pytest.importorskip("mlflow")
    run_dir, report = recorded
    import os

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    client = mlflow.tracking.MlflowClient(tracking_uri=(run_dir.parent / "mlruns-at-run").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("gpusleuth").experiment_id])
    assert run.data.metrics["gpusleuth/goodput"] == pytest.approx(report["outcomes"]["goodput"]["goodput"])
    assert run.data.tags["gpusleuth.top_cause"] == report["findings"][0]["cause"]


def test_mlflow_bad_uri_is_a_sentence(recorded, tmp_path):
    pytest.importorskip("mlflow")
    run_dir, _ = recorded
    res = gpusleuth("report", run_dir, "--mlflow", "nosuchscheme://x")
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "nosuchscheme://x" in res.stderr


def _wandb_records(path: Path) -> list:
    """Records of a ``.wandb`` file: a 7-byte header, then 32 KiB blocks of (crc, length, type) chunks."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    block, pos, out, partial = 32768, 7, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind == 1:
            out.append(chunk)
        elif kind in (2, 3):
            partial += chunk
        elif kind == 4:
            out.append(partial + chunk)
            partial = b""
    records = []
    for raw in out:
        r = pb.Record()
        r.ParseFromString(raw)
        records.append(r)
    return records


def test_wandb_offline_run_gets_headline_findings_and_report(recorded, tmp_path):
    pytest.importorskip("wandb")
    run_dir, report = recorded
    res = gpusleuth("report", run_dir, "--wandb", "gpusleuth-test", "--wandb-dir", tmp_path / "wb",
                    "--price-per-gpu-hour", "3", env={"WANDB_SILENT": "true"})
    assert res.returncode == 0, res.stderr
    files = list((tmp_path / "wb").glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, res.stderr
    records = _wandb_records(files[0])
    kinds = [r.WhichOneof("record_type") for r in records]
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert run.project == "gpusleuth-test" and run.display_name == "tracked" and list(run.tags) == ["input.io"]
    summary = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            for item in r.summary.update:
                summary[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
    o = report["outcomes"]
    assert summary["gpusleuth/goodput"] == pytest.approx(o["goodput"]["goodput"])
    assert summary["gpusleuth/samples_per_s"] == pytest.approx(o["throughput"]["samples_per_s"])
    assert summary["gpusleuth/badput_s.data_wait"] == pytest.approx(o["goodput"]["badput_s"]["data_wait"])
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    assert config["gpusleuth.finding.1.cause"] == report["findings"][0]["cause"]
    artifact = next(r.artifact for r in records if r.WhichOneof("record_type") == "artifact")
    assert artifact.type == "gpusleuth-report"
    assert {m.path for m in artifact.manifest.contents} == {"gpusleuth-report.html", "gpusleuth-report.json"}
    assert "exit" in kinds


def test_mlflow_from_profiler_traces(tmp_path):
    """A trace report has no recording, but its page and wall time still go to the tracker."""
    mlflow = pytest.importorskip("mlflow")
    trace = REPO / "tests" / "fixtures" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
    store = tmp_path / "mlruns"
    res = gpusleuth("report", trace, "--mlflow", store.as_uri(), "--mlflow-experiment", "traces")
    assert res.returncode == 0, res.stderr
    import os

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    client = mlflow.tracking.MlflowClient(tracking_uri=store.as_uri())
    run = client.search_runs([client.get_experiment_by_name("traces").experiment_id])[0]
    assert run.data.metrics["gpusleuth/wall_s"] > 0
    assert {a.path for a in client.list_artifacts(run.info.run_id, "gpusleuth")} >= {"gpusleuth/gpusleuth-report.html"}


PHASES_WITH_ORDINARY_NAMES = """
import time
import gpusleuth
for i in range(30):
    time.sleep(0.01)
    gpusleuth.step(samples=2)
    if i % 10 == 5:
        for name in ("eval (val set)", "save ckpt #3", "a/../b", "x:y", "x::y", "x:3a:y"):
            with gpusleuth.phase(name):
                time.sleep(0.02)
"""


def _decode(key: str) -> str:
    """The inverse of to_mlflow.mlflow_key, written from its stated rule (proves it loses nothing)."""
    import re

    return re.sub(r":(:|[0-9a-f]+:)", lambda m: ":" if m.group(1) == ":" else chr(int(m.group(1)[:-1], 16)), key)


@pytest.fixture(scope="module")
def phased(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("phased") / "run"
    res = gpusleuth("run", "--no-gpu", "--out", run_dir, "--no-report", "--", sys.executable, "-c",
                    PHASES_WITH_ORDINARY_NAMES, timeout=300)
    assert res.returncode == 0, res.stderr
    return run_dir


def test_mlflow_takes_ordinary_phase_names_without_collisions(phased, tmp_path):
    """Case 5: "eval (val set)" and "save ckpt #3" made MLflow refuse the whole batch."""
    mlflow = pytest.importorskip("mlflow")
    store = tmp_path / "mlruns"
    res = gpusleuth("report", phased, "--mlflow", store.as_uri())
    assert res.returncode == 0, res.stderr
    import os

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    client = mlflow.tracking.MlflowClient(tracking_uri=store.as_uri())
    run = client.search_runs([client.get_experiment_by_name("gpusleuth").experiment_id])[0]
    assert run.info.status == "FINISHED"
    badput = {_decode(k[len("gpusleuth/badput_s."):]): v for k, v in run.data.metrics.items()
              if k.startswith("gpusleuth/badput_s.")}
    report = json.loads(gpusleuth("report", phased, "--json").stdout)
    expected = {k: v for k, v in report["outcomes"]["goodput"]["badput_s"].items() if v}  # the summary keeps > 0
    assert {"eval (val set)", "save ckpt #3", "a/../b", "x:y", "x::y", "x:3a:y"} <= set(expected)
    assert sorted(badput) == sorted(expected), (sorted(badput), sorted(expected))
    assert badput == pytest.approx(expected)  # every phase, under its own key, decoded back to its name


def test_mlflow_failure_ends_the_run_failed_with_the_reason(phased, tmp_path):
    """Case 5: a failure half-way left the MLflow run it created RUNNING (and empty when the batch failed).
    Here the store is a real 2 MiB disk that takes the run and its metrics but not the 4 MB HTML artifact."""
    mlflow = pytest.importorskip("mlflow")
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    mnt = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], capture_output=True)
    if mnt.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mnt.stderr.decode().strip()[:100]})")
    try:
        store = disk / "mlruns"
        res = gpusleuth("report", phased, "--mlflow", store.as_uri())
        assert res.returncode == 2, res.stderr
        assert "MLflow could not take the run" in res.stderr and "marked FAILED" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
        import os

        os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
        client = mlflow.tracking.MlflowClient(tracking_uri=store.as_uri())
        run = client.search_runs([client.get_experiment_by_name("gpusleuth").experiment_id])[0]
        assert run.info.status == "FAILED"
        assert "No space left" in run.data.tags["gpusleuth.error"], run.data.tags
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
