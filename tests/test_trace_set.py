"""A trace set's ranks analysed in worker processes (pipeline/trace_set.py) give the same report as in-process.

Real processes throughout: a spawn pool of real workers, a real local Ray cluster (ray.init), the real CLI
in a child process; the worker that dies is really SIGKILLed (what the out-of-memory killer does).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpusleuth.errors import InputError
from gpusleuth.render.json_report import render_json
from gpusleuth.pipeline import trace_set
from gpusleuth.pipeline.build import build_report
from gpusleuth.sources.traceset import trace_job
from gpusleuth.pipeline.trace_set import load_trace_set, plan_workers

HTA = Path(__file__).parent / "fixtures" / "hta"
FILTER = sorted((HTA / "trace_filter").glob("*.json.gz"))  # 2 ranks of one job (HTA's test data)
COMPARE = [HTA / "trace_compare" / "base" / "base.json.gz", HTA / "trace_compare" / "test" / "test.json.gz"]
NOT_A_TRACE = Path(__file__).parent / "fixtures" / "traces" / "number_list.json"


def report_json(paths, **how) -> tuple[str, str]:
    """The JSON report of a trace set, its ranks analysed as ``how`` says (nothing: all events held here),
    with the HTML report's idle-gap histograms (computed beside each rank, not part of the JSON) appended."""
    runs, summaries = load_trace_set(paths, keep_events=not how, **how)
    assert (summaries is None) == (not how)
    assert all((r.trace is None) == bool(how) for r in runs)  # the events stayed in the workers
    report = build_report(trace_job(runs), ranks=summaries)
    return render_json(report), repr(report.display.gap_histograms)


def cut_off(src: Path, dst: Path) -> Path:
    """A rank whose file ends mid-event (a job killed while writing its trace)."""
    text = gzip.decompress(src.read_bytes())
    dst.write_bytes(text[: len(text) * 2 // 3])
    return dst


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


@pytest.mark.parametrize("paths", [FILTER, COMPARE], ids=["trace_filter", "trace_compare"])
@pytest.mark.process
def test_pool_and_ray_give_the_in_process_report(paths, ray_cluster):
    here = report_json(paths)
    assert "GapHistogram(" in here[1]  # the page's histograms are there to compare
    report = json.loads(here[0])
    assert len(report["ranks"]) == 2 and report["findings"]
    assert report["communication"]["slow_rank"] is not None or paths is COMPARE  # the cross-rank verdict
    assert report_json(paths, jobs=1) == here  # rank by rank in this process
    assert report_json(paths, jobs=2) == here  # a pool of 2 spawn workers
    assert report_json(paths, ray_address="") == here  # Ray tasks: the running local cluster is used


@pytest.mark.process
def test_a_damaged_rank_is_salvaged_the_same_way_in_workers(tmp_path, ray_cluster):
    paths = [FILTER[0], cut_off(FILTER[1], tmp_path / "rank-1.json")]
    here = report_json(paths)
    assert "cut off or damaged" in " ".join(json.loads(here[0])["losses"])
    assert report_json(paths, jobs=1) == here
    assert report_json(paths, jobs=2) == here
    assert report_json(paths, ray_address="") == here


@pytest.mark.process
def test_a_rank_that_is_not_a_trace_is_the_same_sentence(ray_cluster):
    paths = [FILTER[0], NOT_A_TRACE]
    errors = []
    for how in ({"keep_events": True}, {"jobs": 1}, {"jobs": 2}, {"ray_address": ""}):
        with pytest.raises(InputError) as err:
            load_trace_set(paths, **how)
        errors.append(str(err.value))
    assert errors[0].startswith(str(NOT_A_TRACE)) and "no trace events" in errors[0]
    assert errors == [errors[0]] * 4


def killed_on_rank_1(path: str):
    """The per-rank step, except that the worker holding rank 1 is SIGKILLed (as by the OOM killer) —
    always, or only the first time when a marker file says so."""
    if "rank-1" in path:
        once = Path(path).with_suffix(".killed-once")
        if not (once.parent / "always").exists() and once.exists():
            return trace_set.analyse_rank_file(path)
        once.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return trace_set.analyse_rank_file(path)


@pytest.mark.process
def test_a_worker_killed_once_is_retried_and_one_killed_again_is_named(tmp_path):
    files = [tmp_path / "rank-0.json.gz", tmp_path / "rank-1.json.gz"]
    for src, dst in zip(FILTER, files):
        dst.write_bytes(src.read_bytes())
    once = trace_set._pool_map(files, 2, None, step=killed_on_rank_1)
    assert [r.run.meta["rank"] for r in once] == [0, 1]  # rank 1's retry, alone, succeeded
    (tmp_path / "always").touch()
    with pytest.raises(InputError) as err:
        trace_set._pool_map(files, 2, None, step=killed_on_rank_1)
    assert err.value.path == str(files[1])
    assert "died" in err.value.problem and "out of memory" in err.value.problem


@pytest.mark.process
def test_the_cli_runs_a_pool_and_says_when_ray_is_missing(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(trace_set.__file__).parents[2])}
    cmd = [sys.executable, "-m", "gpusleuth", "report", *map(str, FILTER), "--json"]
    one = subprocess.run(cmd + ["--annotate", str(tmp_path / "annotated")], capture_output=True, text=True,
                         env=env, timeout=120)  # every rank's events held in this process
    two = subprocess.run(cmd + ["--jobs", "2"], capture_output=True, text=True, env=env, timeout=120)
    # a bare --ray before the files: argparse takes the first file as ADDRESS; it is a trace, not an address
    ray = subprocess.run(cmd[:4] + ["--ray"] + cmd[4:], capture_output=True, text=True, env=env, timeout=120)
    assert one.returncode == 0 and two.returncode == 0 and ray.returncode == 0, one.stderr + two.stderr + ray.stderr
    assert one.stdout == two.stdout == ray.stdout
    # Ray absent: an import that fails, as in an install without the extra
    no_ray = ("import sys; sys.modules['ray'] = None; from gpusleuth.cli.main import main; "
              f"sys.exit(main({['report', *map(str, FILTER), '--ray']!r}))")
    res = subprocess.run([sys.executable, "-c", no_ray], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "pip install 'gpusleuth[ray]'" in res.stderr and "Traceback" not in res.stderr


def test_workers_are_planned_from_ranks_cores_and_memory():
    mb = 2**20
    assert plan_workers([500 * mb], None) == 1  # one rank: in-process
    assert plan_workers([mb] * 8, None) == 1  # a small set: workers would cost more than they share
    assert plan_workers([500 * mb] * 8, None, available=64 * 2**30, cores=16) == 8  # one per rank
    assert plan_workers([500 * mb] * 8, None, available=64 * 2**30, cores=2) == 2  # one per core
    # each rank peaks near 0.6 GB: 4 GiB × 0.7 holds 4 workers at a time; 512 MiB none, so one (never zero)
    assert plan_workers([500 * mb] * 8, None, available=4 * 2**30, cores=16) == 4
    assert plan_workers([500 * mb] * 8, None, available=2**29, cores=16) == 1
    assert plan_workers([mb] * 8, 3) == 3 and plan_workers([mb] * 2, 8) == 2  # --jobs, at most one per rank
