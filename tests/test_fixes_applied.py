"""``benchmarks/fixes_applied.py`` applies each true HIGH's named fix to a copy of the field script: its edits
must still match the scripts as they are (an edited script would otherwise stop the benchmark, or — worse —
a fix would be applied to the wrong line), every true HIGH must have a fix listed, and the verdict must judge
a fix that does not pay as a miss however close the two ratios look."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workloads" / "field"))
import corpus  # noqa: E402

_spec = importlib.util.spec_from_file_location("fixes_applied", ROOT / "benchmarks" / "fixes_applied.py")
assert _spec and _spec.loader
fixes = importlib.util.module_from_spec(_spec)
sys.modules["fixes_applied"] = fixes  # its dataclasses look their module up
_spec.loader.exec_module(fixes)


@pytest.mark.parametrize("name", sorted(fixes.FIXES))
def test_every_listed_edit_matches_its_script_once(name):
    folder = corpus.BY_NAME[name].file.parent
    for fix in fixes.FIXES[name]:
        for rel, old, new in fix.edits:
            text = (folder / rel).read_text()
            assert text.count(old) == 1, (name, fix.names, rel, old[:60])
            assert old != new


def test_every_true_high_has_its_fix_listed():
    named = {s.name for s in corpus.SCRIPTS if s.true_high}
    assert named <= set(fixes.FIXES), sorted(named - set(fixes.FIXES))


def test_the_fix_named_first_is_the_one_applied():
    workers = "DataLoader(..., num_workers=1, persistent_workers=True, prefetch_factor=4)\nEven 1 worker(s) ..."
    cache = ("Make the loading cheaper: … cache decoded/transformed samples, …\nMore workers help less: "
             "DataLoader(..., num_workers=1, …) gives at most ×1.20")
    assert fixes.chosen("vae", workers).names == fixes.WORKERS
    assert fixes.chosen("vae", cache).names == fixes.CACHE
    assert fixes.chosen("mnist_cnn", cache) is None  # a fix the benchmark has no edit for is never substituted


def test_a_fix_that_does_not_pay_is_a_miss():
    assert fixes.verdict(1.21, 0.89).startswith("✗ missed")  # the VAE's old worker prediction
    assert fixes.verdict(1.26, 1.01).startswith("✗ missed")  # within 25 % as ratios, no gain as time saved
    assert fixes.verdict(1.26, 1.23).startswith("✓ held")
    assert fixes.verdict(3.16, 5.48).startswith("✓ conservative")
