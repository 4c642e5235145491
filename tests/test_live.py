"""``gpusleuth run --live`` on a real torch CPU job: a panel under a real pseudo-terminal (the job's own
output scrolls above it, the terminal is given back at the end) and plain periodic lines off a terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import sys
import termios
import time

import pytest

from conftest import gpusleuth

pytestmark = pytest.mark.slow
JOB = [sys.executable, "-m", "gpusleuth.demo.job", "--planted", "--steps", "60", "--transform-rounds", "16"]


def test_plain_lines_when_not_a_terminal(tmp_path):
    res = gpusleuth("run", "--live", "--out", tmp_path / "run", "--no-report", "--", *JOB, timeout=300)
    assert res.returncode == 0, res.stderr
    lines = [x for x in res.stderr.splitlines() if x.startswith("gpusleuth live")]
    assert lines and lines[-1].endswith("(job ended)"), res.stderr
    last = lines[-1]
    assert "steps 60" in last and "samples/s" in last and "data wait" in last and "GPU util no GPU" in last
    assert "\x1b[" not in res.stderr  # no escape codes in a log file
    # the final line's numbers are the run's: data wait is most of a planted step
    share = int(last.split("data wait ")[1].split("%")[0])
    assert 20 <= share <= 90


def _run_in_pty(argv: list[str], rows: int = 30, cols: int = 120, timeout: float = 240) -> bytes:
    pid, fd = pty.fork()
    if pid == 0:  # child: the pty is its controlling terminal, like a shell's
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.execvp(argv[0], argv)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif os.waitpid(pid, os.WNOHANG)[0]:
            break
    else:
        os.kill(pid, 9)
        pytest.fail("the run did not finish under the pty")
    os.waitpid(pid, 0) if _alive(pid) else None
    os.close(fd)
    return out


def _alive(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return False


def test_panel_under_a_real_pseudo_terminal(tmp_path):
    out = _run_in_pty([sys.executable, "-m", "gpusleuth", "run", "--live", "--out", str(tmp_path / "run"), "--", *JOB])
    text = out.decode("utf-8", "replace")
    assert "\x1b[1;" in text and "r\x1b8" in text  # scroll region set above the panel, cursor restored
    assert text.count("gpusleuth live ·") >= 3, text[-2000:]  # refreshed while the job ran (≤ 2 Hz)
    assert "samples/s" in text and "data wait" in text and "GPU util" in text and "train proc" in text
    assert "\x1b[r" in text  # the whole screen given back at the end
    # the job's own output and the final report reach the terminal intact, after the panel was removed
    assert "demo job done: planted stall" in text
    end = text.rindex("\x1b[r")
    assert "gpusleuth report" in text[end:] and "Findings" in text[end:]
    # the panel filled in real numbers while the job ran
    assert "steps 0 " not in text.split("gpusleuth live ·")[-1][:400] or "step " in text
