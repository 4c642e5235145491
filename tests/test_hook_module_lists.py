"""The hook names the modules it patches in three places, each for a reason: the auto-hook (loaded in every
process of the job) watches imports by name without importing the patch modules, ``_gpusleuth_serve`` knows
which of them ``_gpusleuth_follow`` patches without importing it, and each patch module maps a name to its
patch. A module added to one list and not the others is silently never patched (BentoML's dispatcher had to
be added to all three): the lists must agree."""

from __future__ import annotations

import ast
from pathlib import Path

HOOK = Path(__file__).resolve().parents[1] / "src" / "gpusleuth" / "hook"


def _literal(module: str, name: str):
    """The value of a module-level assignment, read without importing the hook (it patches on import)."""
    for node in ast.parse((HOOK / module).read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, ast.Dict):  # {name: patch function}: the keys
                return {ast.literal_eval(k) for k in node.value.keys}
            return set(ast.literal_eval(node.value))
    raise AssertionError(f"{name} not found in {module}")


def test_every_watched_server_module_has_a_patch_and_every_patch_is_watched():
    watched = _literal("_gpusleuth_autohook.py", "SERVER_MODULES")
    serve = _literal("_gpusleuth_serve.py", "PATCHES")
    followed = _literal("_gpusleuth_serve.py", "FOLLOWED")
    follow = _literal("_gpusleuth_follow.py", "FOLLOW_PATCHES")
    assert followed == follow, followed ^ follow
    assert not serve & followed, serve & followed  # one patch per module
    assert watched == serve | followed, watched ^ (serve | followed)
