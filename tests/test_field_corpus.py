"""The field corpus (workloads/field/): real public training scripts under ``gpusleuth run`` on CPU, each
read against its own clock — steps exact, step time and throughput (and data wait, where the script times
it) within 10 %, with and without ``--profile-steps`` — and no HIGH finding whose cause is not true of the
script (``Script.true_high`` names each true one and why).

Both recordings of a script are compared with the clock the script printed in the same run, so a busy host
moves both sides alike. Real frameworks in child processes: slow.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from gpusleuth.pipeline.build import build_report
from gpusleuth.sources.rundir import load_run

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workloads" / "field"))
import corpus  # noqa: E402
from conftest import run_multirank  # noqa: E402

# Defects owned elsewhere in issue 27, open while this corpus landed: strict, so the fix must remove them.
KNOWN = {
    ("imagenet_resnet18", True): "issue 27 defect 1 (analysis/host_ops.py): false HIGH host.python on ResNet-18",
    ("lightning_autoencoder", True): "issue 27 defect 11 (analysis/host_ops.py): false HIGH host.python on "
                                     "Lightning's per-step hooks",
}


def cases():
    for s in corpus.SCRIPTS:
        for profiled in (False, True):
            marks = [pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in s.needs),
                                        reason=f"needs {', '.join(s.needs)} (the test extra)")]
            if (s.name, profiled) in KNOWN:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN[(s.name, profiled)]))
            yield pytest.param(s.name, profiled, marks=marks, id=f"{s.name}-{'profiled' if profiled else 'plain'}")


def record(tmp_path: Path, name: str, profiled: bool):
    script = corpus.BY_NAME[name]
    outs = [tmp_path / f"run{k}" for k in range(3)]
    res = run_multirank(lambda k: corpus.record(script, outs[k], profiled, tmp_path))
    assert res.returncode == 0, res.stderr[-3000:]
    out = next(o for o in reversed(outs) if o.exists())
    clock = script.parse(res.stdout + res.stderr, script)
    run = load_run(out)
    return script, clock, run, build_report(run)


@pytest.mark.slow
@pytest.mark.parametrize("name,profiled", list(cases()))
def test_field_script_matches_its_own_clock(tmp_path, name, profiled):
    script, clock, run, report = record(tmp_path, name, profiled)
    v = corpus.check(script, clock, run, report, profiled)
    assert v.steps_got == v.steps_clock, (v.steps_got, v.steps_clock)
    err = v.errors()
    assert err["step"] is not None and abs(err["step"]) <= corpus.REL, (v.step_s_got, v.step_s_clock)
    assert err["tput"] is not None and abs(err["tput"]) <= corpus.REL, (v.tput_got, v.tput_clock, v.tput_unit)
    assert v.problems() == [], v.problems()
    if profiled:
        assert run.profiles, "--profile-steps recorded no trace"
