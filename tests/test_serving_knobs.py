"""A batching server's fix names the knobs of the framework that serves it (serving/rules/knobs.py): a LitServe
user told to shorten Triton's ``max_queue_delay_microseconds`` has nothing to turn. Judged on a real LitServe run
recorded under `gpusleuth load` (tests/fixtures/serving_runs/README.md), with and without the hook's
``serving_framework`` fact."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpusleuth.pipeline.build import build_report
from gpusleuth.sources.inputs import read_inputs

RUN = Path(__file__).parent / "fixtures" / "serving_runs" / "litserve_batch_wait"


def _findings(run_dir: Path) -> tuple[str | None, dict[str, str]]:
    job = read_inputs([run_dir]).job
    report = build_report(job, display=False)
    rs = report.to_dict()["request_stages"]
    return rs.get("framework"), {f.cause: f.fix for f in report.findings}


def _with_facts(tmp: Path, rewrite) -> Path:
    out = tmp / "run"
    shutil.copytree(RUN, out)
    for f in (out / "raw").glob("events-*.tsv"):
        f.write_text("".join(rewrite(line) for line in f.read_text().splitlines(keepends=True)))
    return out


def test_a_litserve_batch_wait_names_litserves_own_knobs():
    framework, fixes = _findings(RUN)
    assert framework == "litserve"
    fix = fixes["serving.batch_wait"]
    assert "LitServe" in fix and "`batch_timeout`" in fix and "`max_batch_size`" in fix, fix
    assert "Triton" not in fix and "TorchServe" not in fix, fix
    assert not [c for c, f in fixes.items() if "Triton" in f]  # no other fix of a LitServe run names Triton's


def test_without_the_framework_fact_the_fix_names_the_common_servers(tmp_path):
    """The same requests, the fact gone (a run recorded before the hook wrote it, or a hand-written batcher):
    the knobs of the common servers, as examples."""
    framework, fixes = _findings(_with_facts(tmp_path, lambda line: "" if "serving_framework" in line else line))
    assert framework is None
    assert "Triton `max_queue_delay_microseconds`" in fixes["serving.batch_wait"]


def test_a_framework_name_the_hook_never_writes_is_not_believed(tmp_path):
    """A run directory may be anyone's: a fact naming another framework (or markup) is not a framework."""
    framework, fixes = _findings(_with_facts(tmp_path, lambda line: line.replace('"name": "litserve"',
                                                                                  '"name": "<b>triton</b>"')))
    assert framework is None
    assert "<b>" not in " ".join(fixes.values())
