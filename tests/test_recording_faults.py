"""Faults while recording, each on a real ``gpusleuth run`` child process: disk full (a real, small tmpfs),
a read-only run directory, Ctrl-C to the whole process group, a job killed mid-step, a job that inherited
SIGINT ignored, a stray write probe. The run must keep its data, report on it, and pass the job's code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import gpusleuth

PY = sys.executable


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs (root and a kernel that allows the mount; the CI machine runs as root)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.decode().strip()[:100]})")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


FILL_DISK = """
import os, sys, time
time.sleep(1.5)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)  # fill the run's disk to the last byte
for size in (65536, 1):
    try:
        while True:
            os.write(fd, b"x" * size)
    except OSError:
        pass
os.close(fd)
time.sleep(1.5)  # the recorder's flushes fail now
"""


def test_disk_full_keeps_the_streams_and_the_exit_code(small_disk):
    out = small_disk / "run"
    filler = small_disk / "filler"
    res = gpusleuth("run", "--out", out, "--no-report", "--", PY, "-c", FILL_DISK, filler, timeout=120)
    assert res.returncode == 0, res.stderr  # the job's own code, not the launcher's trouble
    assert "Traceback" not in res.stderr, res.stderr
    assert list(out.glob("*.arrows")), "the recorder's streams must stay when Parquet cannot be written"
    # report reads the unfinalized run, on the full disk...
    rep = gpusleuth("report", out, "--json", timeout=120)
    assert rep.returncode == 0, rep.stderr
    losses = json.loads(rep.stdout)["losses"]
    assert any("could not write" in m for m in losses), losses
    # ...and read-only
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    ro = gpusleuth("report", out, "--json", timeout=120)
    assert ro.returncode == 0 and "Traceback" not in ro.stderr, ro.stderr
    subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    # with space again, the next report finalizes it
    filler.unlink()
    again = gpusleuth("report", out, "--json", timeout=120)
    assert again.returncode == 0, again.stderr
    assert not list(out.glob("*.arrows")) and (out / "host.parquet").exists()


def test_a_stray_write_probe_does_not_block_the_retry(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / ".write-test").write_text("ok")  # left by a launcher that hit a full disk
    res = gpusleuth("run", "--out", out, "--no-report", "--", PY, "-c", "pass", timeout=120)
    assert res.returncode == 0, res.stderr


def test_ctrl_c_to_the_whole_group_has_no_traceback(tmp_path):
    out = tmp_path / "run"
    ready = tmp_path / "ready"
    job = ("import pathlib, signal, sys, time\n"
           "signal.signal(signal.SIGINT, lambda *a: sys.exit(130))\n"
           f"pathlib.Path({str(ready)!r}).touch()\n"
           "while True: time.sleep(0.05)\n")
    p = subprocess.Popen([PY, "-m", "gpusleuth", "run", "--out", str(out), "--no-report", "--", PY, "-c", job],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    # Ctrl-C once the job has its handler: a fixed sleep raced the job's start-up on a loaded box (the job
    # then died of the signal itself and gpusleuth rightly passed that on as -2, not 130)
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert ready.exists(), "the job never started"
    time.sleep(0.5)  # and the recorder is sampling
    for _ in range(3):  # Ctrl-C pressed three times, to every process of gpusleuth's group
        try:
            os.killpg(p.pid, signal.SIGINT)
        except ProcessLookupError:
            break
        time.sleep(0.15)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err, err
    assert json.loads((out / "meta.json").read_text())["exit_code"] == 130


STEPS_THEN_KILL = """
import os, signal, time, torch
m = torch.nn.Linear(8, 8); opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(400):
    loss = m(torch.randn(4, 8)).sum(); opt.zero_grad(); loss.backward(); opt.step(); time.sleep(0.01)
    if i == 130:
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_steps_lost_to_a_killed_job_are_stated(tmp_path):
    out = tmp_path / "run"
    res = gpusleuth("run", "--out", out, "--json", "--", PY, "-c", STEPS_THEN_KILL, timeout=180)
    assert res.returncode == 137, res.stderr
    rep = gpusleuth("report", out, "--json")
    losses = json.loads(rep.stdout)["losses"]
    assert any("killed by SIGKILL" in m and "step(s)" in m for m in losses), losses


def test_duration_is_honoured_when_the_job_ignores_sigint(tmp_path):
    out = tmp_path / "run"
    t = time.monotonic()
    res = subprocess.run([PY, "-m", "gpusleuth", "run", "--out", str(out), "--no-report", "--duration", "1",
                          "--grace", "30", "--", PY, "-c", "import time; time.sleep(60)"],
                         capture_output=True, text=True, timeout=120,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # as nohup/a script
    took = time.monotonic() - t
    assert took < 15, f"--duration 1 ran {took:.1f} s (waited --grace for a SIGINT the job ignores)"
    assert res.returncode == 143, res.stderr
