"""A configuration that crashes is a row with its exit code and stderr, never the end of the sweep; and the
three routes a parameter can take into a job ({name} in the command, a knob, an environment variable)."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import gpusleuth

pytestmark = pytest.mark.process  # starts child processes (tests/conftest.py: lanes)

JOB = (
    "import os, sys\n"
    "mode = sys.argv[1]\n"
    "print('MYFLAG=' + os.environ.get('MYFLAG', '?'))\n"
    "if mode.startswith('crash'):\n"
    "    sys.stderr.write('loading shard 3\\n')\n"
    "    raise SystemExit('boom: planted failure in the job')\n"
)


@pytest.mark.slow
def test_a_crashing_configuration_is_reported_not_fatal(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    out = tmp_path / "sweep"
    res = gpusleuth("sweep", "--param", "mode=ok,crash", "--param", "MYFLAG=x", "--repeat", "1", "--out", out,
                    "--json", "--", sys.executable, job, "{mode}", cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr  # one configuration ran: the sweep itself succeeded
    doc = json.loads(res.stdout)
    ok, bad = doc["configs"]
    assert ok["routes"] == {"mode": "command", "MYFLAG": "env"}
    assert not ok["crashed"] and ok["attempts"][0]["exit_code"] == 0
    assert bad["crashed"]
    a = bad["attempts"][0]
    assert a["exit_code"] == 1 and "exited with code 1" in a["error"]
    assert a["stderr_tail"][-2:] == ["loading shard 3", "boom: planted failure in the job"]
    assert (out / "c1-r1.stdout").read_text() == "MYFLAG=x\n"  # the env route reached the job
    human = gpusleuth("sweep", "--param", "mode=crash,crash2", "--repeat", "1", "--out", tmp_path / "s2", "--",
                      sys.executable, job, "{mode}", cwd=tmp_path, timeout=120)
    assert human.returncode == 1  # every configuration crashed
    assert "crashed" in human.stdout and "boom: planted failure in the job" in human.stdout


def test_bad_parameters_are_one_sentence(tmp_path):
    for args, words in (
        (["--param", "num_workers"], "expected NAME=V1,V2"),
        (["--param", "num_workers=0,x"], "not an integer"),
        (["--param", "autocast=fp8"], "not one of off, fp16, bf16"),
        (["--param", "my-thing=1,2"], "not a valid environment variable name"),
        ([], "nothing to vary"),
    ):
        res = gpusleuth("sweep", *args, "--", "python", "-c", "pass", cwd=tmp_path)
        assert res.returncode != 0 and words in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr
