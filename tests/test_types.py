"""The type check: ``python -m mypy`` with the repository's own configuration (pyproject.toml, [tool.mypy]:
strict on analysis/, diagnosis/, report/, render/, pipeline/ and cli/: the typed contracts between the
stages, the renderers that read them, and the passes and verbs that build and print them), clean.

A renamed field of a typed contract (``TraceAnalysis``, ``Report``, ``Facts``) then fails here instead of
becoming a silent ``None`` or zero in a report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.process


def test_the_contract_stages_type_check_clean():
    pytest.importorskip("mypy", reason="the type checker is in the test extra: pip install -e '.[test]'")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    res = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
