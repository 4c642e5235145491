"""The type check: ``python -m mypy`` with the repository's own configuration (pyproject.toml, [tool.mypy]:
strict on every module of the package but the hook's — the typed contracts between the stages, the renderers
that read them, the passes and verbs that build and print them, the roots, the rooms, the load generator and
the public API), clean.

A renamed field of a typed contract (``TraceAnalysis``, ``Report``, ``Facts``) then fails here instead of
becoming a silent ``None`` or zero in a report. And the public API, as a user's own strict mypy sees it (the
package ships ``py.typed``), checks a user's calls against the real signatures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SRC = REPO / "src"

# outside the check: the hook runs inside the user's job, on the job's own Python (3.8 and up) with the standard
# library only, imported by its bare module names (``_gpusleuth_state``) through our sitecustomize
UNCHECKED = ("src/gpusleuth/hook/",)


def test_every_module_but_the_hooks_is_under_the_check():
    """A module the ``files`` list misses is never checked: its untyped calls and None-unchecked attributes go
    unseen (the load generator's reader, the engine scrape's URL) while the check reads clean."""
    files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["files"]

    def covered(rel: str) -> bool:
        return any(rel == f or rel.startswith(f.rstrip("/") + "/") for f in files)

    modules = sorted(p.relative_to(REPO).as_posix() for p in (SRC / "gpusleuth").rglob("*.py"))
    outside = [m for m in modules if not covered(m) and not m.startswith(UNCHECKED)]
    assert outside == []
    checked_after_all = [m for m in modules if m.startswith(UNCHECKED) and covered(m)]
    assert checked_after_all == [], "checked now: take it out of UNCHECKED and its reason"
    assert all((REPO / f).exists() for f in files), "a path in [tool.mypy] files that is not there"


# A user's code, typed, as their own strict mypy checks it: each call must type-check against the real signature,
# and each call in _MISUSES must be refused (the package's own modules are not the user's to fix: silent).
_USE = textwrap.dedent("""
    from __future__ import annotations

    from pathlib import Path
    from typing import Iterable, assert_type

    import gpusleuth
    from gpusleuth.experiments.bench_result import BenchResult
    from gpusleuth.experiments.sweep_result import SweepResult
    from gpusleuth.run.model import Run


    def train(batch_size: int) -> None: ...


    def double(xs: list[int]) -> list[int]:
        return xs + xs


    @gpusleuth.phase("eval")
    def evaluate(n: int) -> float:
        return n / 2


    @gpusleuth.stage("tokenize")
    async def tokenize(text: str) -> list[int]:
        return [len(text)]


    async def serve() -> None:
        assert_type(await tokenize("x"), list[int])


    assert_type(gpusleuth.load_run(Path("gpusleuth-runs/x")), Run)
    assert_type(gpusleuth.load_run("gpusleuth-runs/x"), Run)
    assert_type(gpusleuth.sweep(train, {"batch_size": [8, 16]}, repeat=3), SweepResult)
    assert_type(gpusleuth.sweep(train, {"batch_size": [8]}, 3), SweepResult)
    assert_type(gpusleuth.bench(double, [1, 2], seconds=0.5), BenchResult)
    assert_type(gpusleuth.watch([1, 2]), Iterable[int])
    assert_type(evaluate(3), float)
    gpusleuth.step()
    gpusleuth.step(samples=4)
    gpusleuth.log(samples=1, tokens=2, loss=0.5)
    with gpusleuth.phase("eval") as ph, gpusleuth.stage("tokenize") as st:
        assert_type(ph, gpusleuth.phase)
        assert_type(st, gpusleuth.stage)
""")

_MISUSES = {  # a call → the error code a strict mypy gives it
    'gpusleuth.sweep(train, {"batch_size": [8]}, repeat="3")': "arg-type",
    "gpusleuth.bench(double, 4)": "arg-type",
    "gpusleuth.load_run(3)": "arg-type",
    'gpusleuth.step(samples="4")': "arg-type",
    'evaluate("three")': "arg-type",
    "gpusleuth.sweep_all(train)": "attr-defined",
}


@pytest.mark.process
def test_the_public_api_as_a_users_strict_mypy_sees_it(tmp_path):
    pytest.importorskip("mypy", reason="the type checker is in the test extra: pip install -e '.[test]'")
    misuse = "\n".join(_MISUSES)
    (tmp_path / "use.py").write_text(_USE)
    (tmp_path / "misuse.py").write_text(_USE + misuse + "\n")
    (tmp_path / "mypy.ini").write_text("[mypy]\nstrict = True\nfollow_imports = silent\nignore_missing_imports = True\n")
    env = {**os.environ, "MYPYPATH": str(SRC)}  # this checkout's package, not an installed one
    res = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--cache-dir",
                          str(REPO / ".mypy_cache" / "public_api"), "--no-error-summary", "use.py", "misuse.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    errors = [ln for ln in res.stdout.splitlines() if ": error:" in ln]
    assert [ln for ln in errors if ln.startswith("use.py")] == [], res.stdout + res.stderr
    first = _USE.count("\n") + 1
    got = {}
    for ln in errors:
        m = re.match(r"misuse\.py:(\d+): error: .*\[([a-z-]+)\]$", ln)
        assert m, ln
        got[list(_MISUSES)[int(m.group(1)) - first]] = m.group(2)
    assert got == _MISUSES, res.stdout



@pytest.mark.process
def test_the_contract_stages_type_check_clean():
    pytest.importorskip("mypy", reason="the type checker is in the test extra: pip install -e '.[test]'")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    res = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
