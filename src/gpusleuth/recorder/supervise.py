"""The recorder process's lifecycle, seen from the launcher: started in its own session (it survives the job
and Ctrl-C), told the job's pid, stopped at the end, its death noticed and said, its status read back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpusleuth.run.layout import RunDir


def start_recorder(run_dir: Path, interval_s: float, use_gpu: bool, prometheus: str | None,
                   job: str, stall_after: str = "auto", on_stall: str = "dump") -> subprocess.Popen[bytes] | None:
    """``stall_after``/``on_stall``: the stall watch (recorder/stallwatch.py); its line goes to our stderr,
    handed to the recorder as an inherited descriptor (the recorder's own output goes to recorder.log)."""
    cmd = [sys.executable, "-m", "gpusleuth.recorder.process", "--run-dir", str(run_dir),
           "--interval", str(interval_s), "--stall-after", stall_after, "--on-stall", on_stall]
    if not use_gpu:
        cmd.append("--no-gpu")
    if prometheus:
        cmd += ["--prometheus", prometheus, "--job", job]
    say = None
    if stall_after != "off":
        try:
            say = os.dup(sys.stderr.fileno())
            cmd += ["--say-fd", str(say)]
        except (OSError, ValueError, AttributeError):
            say = None
    log = open(RunDir(run_dir).recorder_log, "ab")
    try:
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=log, start_new_session=True,
                                pass_fds=(say,) if say is not None else ())
    except OSError:
        return None
    finally:
        log.close()
        if say is not None:
            os.close(say)


def tell(recorder: subprocess.Popen[bytes] | None, line: str, notes: list[str]) -> None:
    if recorder is None or recorder.stdin is None:
        return
    try:
        recorder.stdin.write(line.encode())
        recorder.stdin.flush()
    except (BrokenPipeError, OSError):
        pass


def recorder_died(recorder: subprocess.Popen[bytes], notes: list[str]) -> None:
    msg = (f"the recorder process exited early (code {recorder.returncode}); telemetry after that moment "
           f"is missing (see recorder.log)")
    if msg not in notes:
        notes.append(msg)


def stop_recorder(recorder: subprocess.Popen[bytes] | None, notes: list[str]) -> None:
    if recorder is None:
        notes.append("the recorder could not be started: no telemetry was recorded")
        return
    if recorder.poll() is not None:
        recorder_died(recorder, notes)
        return
    tell(recorder, "stop\n", notes)
    try:
        if recorder.stdin is not None:
            recorder.stdin.close()
    except OSError:
        pass
    try:
        recorder.wait(timeout=10)
    except subprocess.TimeoutExpired:
        recorder.kill()
        recorder.wait()
        notes.append("the recorder did not stop within 10 s and was killed; its last second may be missing")


def read_recorder_status(run_dir: Path) -> dict[str, Any] | None:
    import json

    path = RunDir(run_dir).recorder_status
    try:
        status = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None
