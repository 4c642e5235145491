"""Shared helpers: run the real ``gpusleuth`` CLI in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
TRACES = FIXTURES / "hta"  # HTA's real Kineto traces (MIT), MANIFEST.md beside them


def gpusleuth(*args, timeout=180, env=None, **kw) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gpusleuth", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, env=full_env, **kw,
    )


def free_port() -> int:
    """A free loopback port (torchrun's ``--master_port 0`` hangs torch's static rendezvous)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def report_json(run_dir: Path) -> dict:
    res = gpusleuth("report", run_dir, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture
def run_cli():
    return gpusleuth
