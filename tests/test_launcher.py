"""``gpusleuth run`` around real child processes: exit codes, signals, crashes, bad commands."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import gpusleuth, report_json


def _wait_for(condition, what: str, timeout: float = 60.0, every: float = 0.05):
    """Poll ``condition`` until it holds (no fixed sleep: a loaded host only makes this slower)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _host_samples(run_dir: Path) -> int:
    """Rows of the host telemetry stream so far (0 while it does not exist)."""
    from gpusleuth.run.streams import read_stream

    path = run_dir / "host.arrows"
    if not path.exists():
        return 0
    table, _loss = read_stream(path)
    return 0 if table is None else table.num_rows


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:  # a zombie is gone for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True

PY = sys.executable


def meta(run_dir: Path) -> dict:
    return json.loads((run_dir / "meta.json").read_text())


@pytest.mark.process
def test_exit_code_and_output_pass_through(tmp_path):
    out = tmp_path / "run"
    res = gpusleuth("run", "--out", out, "--", PY, "-c",
                    "import sys; print('hello from job'); print('err line', file=sys.stderr); sys.exit(3)")
    assert res.returncode == 3
    assert res.stdout == "hello from job\n"  # the job's stdout is untouched; our report goes to stderr
    assert "err line" in res.stderr
    m = meta(out)
    assert m["exit_code"] == 3 and m["signal"] is None
    assert m["end_ns"] > m["start_ns"]
    assert (out / "host.parquet").exists() and (out / "procs.parquet").exists()


@pytest.mark.process
def test_job_crash_is_reported_with_its_code(tmp_path):
    out = tmp_path / "run"
    res = gpusleuth("run", "--out", out, "--", PY, "-c", "raise RuntimeError('boom')")
    assert res.returncode == 1
    assert "RuntimeError: boom" in res.stderr
    assert report_json(out)["run"]["exit_code"] == 1


@pytest.mark.process
def test_sigkilled_job(tmp_path):
    out = tmp_path / "run"
    res = gpusleuth("run", "--out", out, "--", PY, "-c",
                    "import os, signal, time; time.sleep(0.5); os.kill(os.getpid(), signal.SIGKILL)")
    assert res.returncode == 128 + signal.SIGKILL
    m = meta(out)
    assert m["signal"] == "SIGKILL" and m["exit_code"] == 137
    assert report_json(out)["run"]["signal"] == "SIGKILL"


@pytest.mark.process
def test_oom_style_exit(tmp_path):
    # What the kernel's OOM killer leaves behind: SIGKILL after a burst of allocation.
    out = tmp_path / "run"
    script = ("import os, signal, time; x = bytearray(200 * 2**20); x[::4096] = b'1' * len(x[::4096]); "
              "time.sleep(1.5); os.kill(os.getpid(), signal.SIGKILL)")
    res = gpusleuth("run", "--out", out, "--", PY, "-c", script)
    assert res.returncode == 137
    rep = report_json(out)
    rss = [p["rss_max_bytes"] for p in rep["host"]["processes"] if p["rss_max_bytes"]]
    assert rep["run"]["exit_code"] == 137 and rss


@pytest.mark.process
def test_non_python_child(tmp_path):
    out = tmp_path / "run"
    res = gpusleuth("run", "--out", out, "--", "sh", "-c", "echo shell-job; sleep 0.3; exit 7")
    assert res.returncode == 7
    assert res.stdout == "shell-job\n"
    rep = report_json(out)
    assert rep["outcomes"]["steps"] == 0
    assert abs(sum(rep["outcomes"]["time_share"].values()) - 1) < 1e-9


@pytest.mark.process
def test_unknown_command(tmp_path):
    out = tmp_path / "run"
    res = gpusleuth("run", "--out", out, "--", "no-such-command-xyz")
    assert res.returncode == 127
    assert "no-such-command-xyz: command not found" in res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists()  # nothing is created for a job that cannot start


def test_unwritable_run_dir(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    marker = tmp_path / "job-ran"
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user who can write anywhere (root without capabilities dropped)")
        res = gpusleuth("run", "--out", locked / "run", "--", PY, "-c", f"open({str(marker)!r}, 'w')")
    finally:
        locked.chmod(0o700)
    assert res.returncode == 2
    assert "cannot" in res.stderr and "run directory" in res.stderr
    assert not marker.exists()  # the error comes before the job starts


@pytest.mark.process
def test_run_dir_that_is_a_file(tmp_path):
    # Works for root too: a path under a regular file can never be created.
    blocker = tmp_path / "file"
    blocker.write_text("x")
    marker = tmp_path / "job-ran"
    res = gpusleuth("run", "--out", blocker / "run", "--", PY, "-c", f"open({str(marker)!r}, 'w')")
    assert res.returncode == 2
    assert "run directory" in res.stderr and "Traceback" not in res.stderr
    assert not marker.exists()


@pytest.mark.process
def test_no_command_is_a_usage_error(tmp_path):
    res = gpusleuth("run", "--out", tmp_path / "r")
    assert res.returncode == 2 and "no command given" in res.stderr


@pytest.mark.process
def test_duration_stops_the_job_gracefully(tmp_path):
    out = tmp_path / "run"
    script = (
        "import time\n"
        "try:\n    time.sleep(60)\n"
        "except KeyboardInterrupt:\n    print('got SIGINT, cleaning up'); raise SystemExit(5)\n"
    )
    t0 = time.monotonic()
    res = gpusleuth("run", "--out", out, "--duration", "1", "--", PY, "-c", script)
    assert time.monotonic() - t0 < 20
    assert res.returncode == 5
    assert "got SIGINT, cleaning up" in res.stdout
    m = meta(out)
    assert m["stopped_by"].startswith("--duration")


@pytest.mark.process
def test_duration_escalates_to_sigkill(tmp_path):
    out = tmp_path / "run"
    script = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)\n"
    res = gpusleuth("run", "--out", out, "--duration", "0.5", "--grace", "0.5", "--", PY, "-c", script)
    assert res.returncode == 137
    assert meta(out)["signal"] == "SIGKILL"


@pytest.mark.process
def test_sigterm_to_gpusleuth_reaches_the_job(tmp_path):
    out = tmp_path / "run"
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('job got SIGTERM', flush=True), sys.exit(9)))\n"
        "print('ready', flush=True)\ntime.sleep(60)\n"
    )
    proc = subprocess.Popen([PY, "-m", "gpusleuth", "run", "--out", str(out), "--", PY, "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 9, stderr
    assert "job got SIGTERM" in stdout
    assert meta(out)["stopped_by"] == "SIGTERM to gpusleuth"


@pytest.mark.process
def test_ctrl_c_in_a_terminal_reaches_the_job_once(tmp_path):
    """A real pseudo-terminal: ^C goes to the job's foreground process group, exactly once. The job says 'ready'
    inside the block that catches the interrupt: said before it, the ^C sent on reading it could land while
    the job was still returning from its print — an uncaught KeyboardInterrupt, 130 (once in a full run)."""
    out = tmp_path / "run"
    script = (
        "import time\ncount = 0\n"
        "for _ in range(2):\n"
        "    try:\n        print('ready', flush=True)\n        time.sleep(30)\n"
        "    except KeyboardInterrupt:\n        count += 1; print('interrupt', count, flush=True); time.sleep(1.0); break\n"
        "raise SystemExit(40 + count)\n"
    )
    pid, fd = pty.fork()
    if pid == 0:  # child: becomes the session leader with the pty as controlling terminal
        os.execv(PY, [PY, "-m", "gpusleuth", "run", "--no-report", "--out", str(out), "--", PY, "-c", script])
    buf = b""
    deadline = time.monotonic() + 60
    sent = False
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
        if b"ready" in buf and not sent:
            # ^C must reach the job's group: wait until the launcher has made it the terminal's foreground
            _wait_for(lambda: os.tcgetpgrp(fd) != pid, "the job's process group to own the terminal", 30)
            os.write(fd, b"\x03")
            sent = True
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 41, buf.decode(errors="replace")
    assert buf.count(b"interrupt 1") == 1


@pytest.mark.process
def test_recorder_killed_mid_run_keeps_earlier_samples(tmp_path):
    out = tmp_path / "run"
    script = "import time; time.sleep(4)"
    proc = subprocess.Popen([PY, "-m", "gpusleuth", "run", "--no-report", "--out", str(out), "--", PY, "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    status = out / "recorder.json"
    _wait_for(status.exists, "the recorder's status file", 30)
    _wait_for(lambda: _host_samples(out) >= 5, "five host samples on disk", 60)
    rec_pid = json.loads(status.read_text())["pid"]
    os.kill(rec_pid, signal.SIGKILL)
    killed_at = time.time_ns()
    proc.communicate(timeout=60)
    assert proc.returncode == 0  # the job is never harmed by the recorder dying
    rep = report_json(out)
    assert any("recorder process exited early" in loss for loss in rep["losses"])
    import pyarrow.parquet as pq

    t = pq.read_table(out / "host.parquet").column("t_ns").to_pylist()
    assert max(t) >= killed_at - int(1.5e9)  # at most about a second lost


@pytest.mark.process
def test_launcher_killed_run_is_salvaged_by_report(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([PY, "-m", "gpusleuth", "run", "--no-report", "--out", str(out), "--",
                             PY, "-c", "import time; time.sleep(3)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    _wait_for(lambda: (out / "recorder.json").exists() and _host_samples(out) >= 5, "five host samples on disk", 60)
    rec_pid = json.loads((out / "recorder.json").read_text())["pid"]
    os.killpg(proc.pid, signal.SIGKILL)  # launcher and job die; the recorder stops once both are gone
    proc.wait()
    _wait_for(lambda: _gone(rec_pid), "the recorder to notice and stop", 60)
    assert (out / "host.arrows").exists()
    rep = report_json(out)
    assert rep["run"]["exit_code"] is None
    assert any("no recorded end" in loss for loss in rep["losses"])
    assert rep["host"]["samples"] >= 5
    assert (out / "host.arrows").exists() and not (out / "host.parquet").exists()  # reading never writes
    fin = subprocess.run([PY, "-m", "gpusleuth", "finalize", str(out)], capture_output=True, text=True, timeout=120)
    assert fin.returncode == 0, fin.stderr
    assert (out / "host.parquet").exists() and not (out / "host.arrows").exists()  # finalized on request
