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

from conftest import gpusleuth, without_dac

pytestmark = pytest.mark.process  # starts child processes (tests/conftest.py: lanes)

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


FILL = """
def fill(path):  # fill the run's disk to the last byte
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    for size in (65536, 1):
        try:
            while True:
                os.write(fd, b"x" * size)
        except OSError:
            pass
    os.close(fd)
"""
FILL_DISK = "import os, sys, time\n" + FILL + """
time.sleep(1.5)
fill(sys.argv[1])
time.sleep(1.5)  # the recorder's flushes fail now
"""


def test_disk_full_keeps_the_telemetry_and_the_exit_code(small_disk):
    out = small_disk / "run"
    filler = small_disk / "filler"
    res = gpusleuth("run", "--out", out, "--no-report", "--", PY, "-c", FILL_DISK, filler, timeout=120)
    assert res.returncode == 0, res.stderr  # the job's own code, not the launcher's trouble
    assert "Traceback" not in res.stderr, res.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["exit_code"] == 0 and meta["end_ns"], meta
    # report reads it, on the full disk...
    rep = gpusleuth("report", out, "--json", timeout=120)
    assert rep.returncode == 0, rep.stderr
    # ...and read-only
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        ro = gpusleuth("report", out, "--json", timeout=120)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    assert ro.returncode == 0 and "Traceback" not in ro.stderr, ro.stderr
    assert json.loads(ro.stdout)["run"]["wall_s"] == json.loads(rep.stdout)["run"]["wall_s"]


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


# ---------------------------------------------------------------------------------------------------------
# Issue 23: output capture on a full disk, steps on a full disk, racing --out claims.

def _fill(disk: Path, leave: int = 0, name: str = "filler") -> Path:
    """Fill ``disk`` (a tmpfs) with one file until ``leave`` bytes or fewer are free."""
    path = disk / name
    with open(path, "ab") as f:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    st = os.statvfs(disk)
                    if st.f_bavail * st.f_frsize - size < leave:
                        break
                    f.write(b"x" * size)
                    f.flush()
            except OSError:
                pass
    return path


FLOOD_OUTPUT = """
import sys
for _ in range(200):  # 12.8 MB on stdout, more than the 4 MiB disk holds
    sys.stdout.write("y" * 63 + "\\n" * 1 + "z" * 63999 + "\\n")
sys.stdout.flush()
sys.stderr.write("done\\n")
"""


@pytest.mark.slow
def test_capture_output_on_a_full_disk_drains_the_job(small_disk):
    """Case 2: the copy thread died on ENOSPC and the job blocked writing to a pipe nobody read."""
    out = small_disk / "run"
    p = subprocess.run([PY, "-m", "gpusleuth", "run", "--out", str(out), "--no-report", "--capture-output", "--",
                        PY, "-c", FLOOD_OUTPUT], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr, p.stderr
    assert p.stderr.rstrip().splitlines().count("done") == 1  # the job's stderr still came through, once
    losses = json.loads((out / "meta.json").read_text())["losses"]
    note = [m for m in losses if m.startswith("output.log is incomplete")]
    assert note, losses
    logged = (out / "output.log").stat().st_size
    assert f"after {logged:,} bytes" in note[0], (note, logged)  # the log ends where the note says


STEPS_THROUGH_A_FULL_DISK = "import os, sys, time\nimport gpusleuth\n" + FILL + """
for i in range(300):
    time.sleep(0.01)
    gpusleuth.step(samples=4)
    if i == 60:  # the job fills its own disk mid-run (checkpoints, logs)
        fill(sys.argv[1])
"""


def _steps_in(run_dir: Path) -> int:
    return sum(line.startswith("S\t") for p in (run_dir / "raw").glob("events-*.tsv")
               for line in p.read_text().splitlines())


@pytest.mark.slow
def test_a_disk_filled_mid_run_keeps_every_step_and_the_end(small_disk):
    """Case 3: 61-100 % of the steps were gone, the end unsaved ("wall 1.05 s" for 28 s), nothing said."""
    out = small_disk / "run"
    t0 = time.time()
    res = gpusleuth("run", "--out", out, "--no-report", "--", PY, "-c", STEPS_THROUGH_A_FULL_DISK,
                    small_disk / "filler", timeout=120)
    took = time.time() - t0
    assert res.returncode == 0, res.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["exit_code"] == 0 and meta["end_ns"], meta  # the end was saved in the reserved space
    assert _steps_in(out) == 300, "every step the job made is in the run"
    rep = gpusleuth("report", out, "--json", timeout=120)
    assert rep.returncode == 0, rep.stderr
    doc = json.loads(rep.stdout)
    wall = (meta["end_ns"] - meta["start_ns"]) / 1e9
    assert 3.0 <= wall <= took, (wall, took)  # 300 steps of >= 10 ms: not the 1 s the last sample said


@pytest.mark.slow
def test_a_disk_full_from_the_start_states_where_the_steps_are(small_disk):
    """Case 3, 20 kB free at the start: no room for a reserve either; the steps go to the spill directory
    and the run's notes say how many, and where (the exact count, checked against the file)."""
    _fill(small_disk, leave=20_000, name="before")
    out = small_disk / "run"
    res = gpusleuth("run", "--out", out, "--no-report", "--", PY, "-c", STEPS_THROUGH_A_FULL_DISK,
                    small_disk / "filler", timeout=120)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    import re

    m = re.search(r"([\d,]+) event line\(s\) \(([\d,]+) step\(s\)\) of raw/(events-\d+\.tsv) could not be "
                  r"written .* kept in (\S+):", res.stderr)
    assert m, res.stderr
    spilled = Path(m.group(4))
    try:
        # the run's file may end inside a line whose rest is the spill's first bytes: whole lines only
        written = (out / "raw" / m.group(3)).read_text()
        complete = sum(line.startswith("S\t") for line in written.split("\n")[:-1])
        whole = written.split("\n")[-1] + spilled.read_text()
        assert whole.count("\nS\t") + whole.startswith("S\t") + complete == 300, "written + spilled = every step"
        assert int(m.group(2).replace(",", "")) == 300 - complete, "the note says exactly how many are elsewhere"
    finally:
        spilled.unlink(missing_ok=True)
        spilled.parent.rmdir()


_CLAIM = """
import sys
from multiprocessing import Barrier, Process, Queue
from pathlib import Path
from gpusleuth.errors import LaunchError
from gpusleuth.recorder.launcher import prepare_run_dir

def racer(base, n, barrier, won):
    wins = []
    for i in range(n):
        barrier.wait()
        try:
            prepare_run_dir(Path(base) / str(i))
            wins.append(i)
        except LaunchError:
            pass
    won.put(wins)

if __name__ == "__main__":
    base, n = sys.argv[1], int(sys.argv[2])
    barrier, won = Barrier(2), Queue()
    ps = [Process(target=racer, args=(base, n, barrier, won)) for _ in range(2)]
    for p in ps: p.start()
    a, b = won.get(timeout=120), won.get(timeout=120)
    for p in ps: p.join()
    print(len(set(a) & set(b)), len(set(a) | set(b)))
"""


@pytest.mark.slow
def test_two_runs_never_claim_the_same_out(tmp_path):
    """Case 4: two processes claim 300 directories in lockstep; each directory goes to exactly one."""
    res = subprocess.run([PY, "-c", _CLAIM, str(tmp_path), "300"], capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    both, claimed = map(int, res.stdout.split())
    assert both == 0 and claimed == 300, res.stdout


@pytest.mark.slow
def test_two_gpusleuth_runs_racing_for_one_out(tmp_path):
    out = tmp_path / "run"
    procs = [subprocess.Popen([PY, "-m", "gpusleuth", "run", "--out", str(out), "--no-report", "--no-gpu", "--",
                               PY, "-c", "pass"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes[0] == 0 and codes[1] != 0, results
    assert any("not empty" in err for _, err in results), results


# ---------------------------------------------------------------------------------------------------------
# Reading never writes (issue 22, deliverable 3; issue 23 cases 1 and 9): report, compare, fleet and the
# HTML page leave a run directory byte-identical, finished, still recording, or left by a killed launcher.

def _tree(run_dir: Path) -> dict[str, bytes]:
    """Every file of the run, by relative path, with its bytes (what "byte-identical" compares)."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


STEPS_FOR = """
import os, sys, time
import gpusleuth

end = time.time() + float(sys.argv[1])
stop = sys.argv[2] if len(sys.argv) > 2 else None  # or until this file exists (at most argv[1] seconds)
while time.time() < end and not (stop and os.path.exists(stop)):
    time.sleep(0.02)
    gpusleuth.step(samples=2)
"""


@pytest.mark.slow
def test_reading_a_finished_run_never_writes_it(tmp_path):
    out = tmp_path / "run"
    res = gpusleuth("run", "--out", out, "--no-report", "--no-gpu", "--", PY, "-c", STEPS_FOR, "1", timeout=120)
    assert res.returncode == 0, res.stderr
    before = _tree(out)
    env = {"GPUSLEUTH_CACHE_DIR": str(tmp_path / "cache")}
    for args in (("report", out, "--json"), ("report", out, "--html", tmp_path / "r.html"),
                 ("compare", out, out), ("fleet", out)):
        r = gpusleuth(*args, env=env, timeout=120)
        assert r.returncode == 0, (args, r.stderr)
    assert _tree(out) == before
    assert list((tmp_path / "cache" / "summaries").glob("*.json")), "fleet keeps its summary outside the run"


@pytest.mark.slow
def test_reports_of_a_run_being_recorded_take_nothing_from_it(tmp_path):
    """Reports, compare and fleet of a run being recorded. Case 1: a report at t = 10 s of a 25 s run finalized it under the recorder (89 host samples over
    8.8 s instead of 383 over 38 s), and said the launcher was killed. Case 9: a second concurrent report
    said "nothing is lost: host.arrows is kept" after the first had converted it."""
    out, stop = tmp_path / "run", tmp_path / "stop"
    job = subprocess.Popen([PY, "-m", "gpusleuth", "run", "--out", str(out), "--no-report", "--no-gpu", "--",
                            PY, "-c", STEPS_FOR, "150", stop], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (list((out / "raw").glob("events-*.tsv")) and
                                                   (out / "host.arrows").exists()):
            time.sleep(0.1)
        time.sleep(2.0)  # a few flushes of both
        streams = {p.name: p.stat().st_ino for p in out.glob("*.arrows")}
        reports = [subprocess.Popen([PY, "-m", "gpusleuth", "report", str(out), "--json"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True) for _ in range(2)]
        docs = []
        for r in reports:
            stdout, stderr = r.communicate(timeout=120)
            assert r.returncode == 0, stderr
            docs.append(json.loads(stdout))
        cache = tmp_path / "cache"
        for args in (("compare", out, out, "--json"), ("fleet", out, "--json")):  # the other readers too
            r = gpusleuth(*args, env={"GPUSLEUTH_CACHE_DIR": str(cache)}, timeout=120)
            assert r.returncode == 0, (args, r.stderr)
        assert json.loads(r.stdout)["runs"] == 1
        assert not list(cache.glob("summaries/*.json")), "a run still being recorded is summarized afresh"
        assert job.poll() is None, "the reports must run while the job is recording"
        assert {p.name: p.stat().st_ino for p in out.glob("*.arrows")} == streams, "streams untouched"
        assert not list(out.glob("*.parquet")) and not (out / "summary.json").exists()
        for doc in docs:
            losses = doc["losses"]
            assert any("still being recorded" in m for m in losses), losses
            assert not [m for m in losses if "still being recorded" not in m], losses  # no phantom loss
            assert doc["outcomes"]["steps"] >= 20, doc["outcomes"]
    finally:
        stop.touch()
        _, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    final = gpusleuth("report", out, "--json", timeout=120)
    doc = json.loads(final.stdout)
    import pyarrow.parquet as pq

    t = pq.read_table(out / "host.parquet").column("t_ns").to_numpy()
    wall = doc["run"]["wall_s"]
    assert (t.max() - t.min()) / 1e9 >= wall - 1.5, ((t.max() - t.min()) / 1e9, wall)  # the telemetry is whole
    assert not [m for m in doc["losses"]], doc["losses"]


@pytest.mark.slow
def test_a_run_whose_launcher_died_is_read_as_is_and_finalized_on_request(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([PY, "-m", "gpusleuth", "run", "--no-report", "--no-gpu", "--out", str(out), "--",
                             PY, "-c", STEPS_FOR, "4"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (out / "host.arrows").exists():
        time.sleep(0.1)
    time.sleep(1.5)
    os.killpg(proc.pid, signal.SIGKILL)  # the launcher (the job has its own group: it runs on to its end)
    proc.wait()
    rec_pid = json.loads((out / "recorder.json").read_text())["pid"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and os.path.exists(f"/proc/{rec_pid}"):
        time.sleep(0.1)
    before = _tree(out)
    rep = gpusleuth("report", out, "--json", timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert _tree(out) == before
    losses = json.loads(rep.stdout)["losses"]
    assert any("its launcher was killed" in m and "gpusleuth finalize" in m for m in losses), losses
    fin = gpusleuth("finalize", out, timeout=120)
    assert fin.returncode == 0, fin.stderr
    assert (out / "host.parquet").exists() and not list(out.glob("*.arrows"))
    assert not (out / ".recording").exists() and not (out / ".space-reserve").exists()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["end_ns"] and any("its launcher was killed" in m for m in meta["losses"])
    again = json.loads(gpusleuth("report", out, "--json", timeout=120).stdout)
    assert not any("gpusleuth finalize" in m for m in again["losses"]), again["losses"]


CTRL_C_THEN_SLOW_SHUTDOWN = """
import pathlib, sys, time
import gpusleuth
ready = pathlib.Path(sys.argv[1])
try:
    while True:
        time.sleep(0.02)
        gpusleuth.step(samples=2)
        ready.touch()
except KeyboardInterrupt:
    time.sleep(2.0)  # a checkpoint written on Ctrl-C: shutdown time, no step lost
    raise
"""


@pytest.mark.slow
def test_no_phantom_loss_after_ctrl_c(tmp_path):
    """Case 9: after SIGINT the report claimed 73-143 steps (1.5-2.4 s) missing when none were: the gap
    between the last step and the job's end was read as steps lost, though the hook's exit flush ran."""
    out, ready = tmp_path / "run", tmp_path / "ready"
    p = subprocess.Popen([PY, "-m", "gpusleuth", "run", "--out", str(out), "--no-report", "--no-gpu", "--",
                          PY, "-c", CTRL_C_THEN_SLOW_SHUTDOWN, ready], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)  # forwarded to the job once, as a scheduler's or a user's Ctrl-C
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err  # died of SIGINT, passed through
    doc = json.loads(gpusleuth("report", out, "--json", timeout=120).stdout)
    assert doc["outcomes"]["steps"] >= 20
    assert not [m for m in doc["losses"] if "missing" in m or "lost" in m], doc["losses"]


@pytest.mark.parametrize("verb", [["report"], ["report", "--json"], ["finalize"]])
def test_a_run_directory_the_user_cannot_enter_is_one_sentence(tmp_path, verb):
    """Case 8: a PermissionError traceback (run/meta.py) on a run directory the user may not enter."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text("{}")
    run.chmod(0)
    try:
        res = subprocess.run(without_dac([PY, "-m", "gpusleuth", verb[0], str(run), *verb[1:]]),
                             capture_output=True, text=True, timeout=60)
    finally:
        run.chmod(0o755)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines() == [f"gpusleuth: error: {run}: cannot be read (Permission denied: "
                                               "you may not enter this directory)"]


@pytest.mark.slow
def test_hostile_100kb_names_are_cut_and_inert(tmp_path):
    """Case 10: a 100 kB label and command made a 213 KB console report, and the HTML <title> kept a raw ESC."""
    out, page = tmp_path / "run", tmp_path / "r.html"
    label = "\x1b]52;c;cHduZWQ=\x07evil\x1b[2J" + "L" * 100_000
    code = "pass  # " + "C" * 100_000
    res = gpusleuth("run", "--out", out, "--no-report", "--no-gpu", "--label", label, "--", PY, "-c", code)
    assert res.returncode == 0, res.stderr
    rep = gpusleuth("report", out, "--html", page)
    assert rep.returncode == 0, rep.stderr
    assert "\x1b" not in rep.stdout and "\x07" not in rep.stdout
    assert len(rep.stdout) < 30_000, len(rep.stdout)  # the label and the command, each cut in its middle
    assert "characters not shown" in rep.stdout
    title = page.read_text().split("<title>", 1)[1].split("</title>", 1)[0]
    assert "\x1b" not in title and "\x07" not in title and len(title) < 400, title[:120]
    assert "\\x1b]52" in title  # shown, visibly escaped
    doc = json.loads(gpusleuth("report", out, "--json").stdout)
    assert doc["run"]["label"] == label  # the JSON keeps the data whole (escaped by JSON itself)


def _with_token(token: str) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if token.encode() in (p / "cmdline").read_bytes():
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


@pytest.mark.slow
def test_a_setsid_grandchild_does_not_outlive_the_run(tmp_path):
    """The fault scenarios' 'setsid grandchild': a daemon the job started in its own session kept running
    after `gpusleuth run` returned (out of the job's process group, no signal reached it)."""
    token = f"gs-orphan-{os.getpid()}-{time.monotonic_ns()}"
    job = ("import subprocess, sys\n"
           f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {token!r}], "
           "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n")
    out = tmp_path / "run"
    try:
        res = subprocess.run([PY, "-m", "gpusleuth", "run", "--out", str(out), "--no-report", "--no-gpu", "--",
                              PY, "-c", job], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             timeout=120)
        assert res.returncode == 0, res.stderr
        assert _with_token(token) == [], "the job's setsid grandchild outlived the run"
        losses = json.loads((out / "meta.json").read_text())["losses"]
        assert any("left 1 process(es) running" in m for m in losses), losses
    finally:
        for pid in _with_token(token):
            os.kill(pid, signal.SIGKILL)
