"""The recording-fault scenarios of issue 23, each on a real ``gpusleuth run``, checked from outside.

For every scenario the job counts its own steps into a file on another filesystem (the truth, written
before each ``gpusleuth.step()`` returns), and the script checks what a user needs:

- the report works (``gpusleuth report DIR --json`` exits 0, no traceback);
- the exit code is the job's (where gpusleuth saw the job end);
- steps lost ≤ 1 s of steps, or the report states the loss (a sentence in ``losses`` naming steps);
- nothing is left running (no process carrying the scenario's marker once it is over).

Prints one row per scenario and a summary; exits 1 if any scenario fails. Root is needed for the
filesystem scenarios (a real tmpfs made small or full); they are skipped, and said, otherwise.

Usage: python benchmarks/recording_faults.py [--only NAME[,NAME…]] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

PY = sys.executable
STEP_S = 0.02

# The job: steps of STEP_S, each counted in the truth file first; then whatever the scenario adds.
JOB = """
import os, signal, subprocess, sys, time
import gpusleuth
truth, seconds, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
if mode == "ignore-int":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
if mode == "ignore-int-term":
    signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "setsid-grandchild":
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", truth], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
fd = os.open(truth, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
n, end = 0, time.time() + seconds
while time.time() < end:
    time.sleep(%(step)r)
    n += 1
    os.pwrite(fd, b"%%12d" %% n, 0)
    gpusleuth.step(samples=1)
    if mode == "kill-self" and n == 100:
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "forks" and n <= 500:
        if os.fork() == 0:
            os._exit(0)
        os.waitpid(-1, 0)
    if mode == "flood" and n == 10:
        chunk = b"y" * 65535 + b"\\n"
        for _ in range(800):  # 50 MiB
            os.write(1, chunk)
    if mode == "fill" and n == 50:
        f = os.open(sys.argv[4], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(f, b"x" * size)
            except OSError:
                pass
        os.close(f)
code = int(os.environ.get("JOB_EXIT", "0"))
os._exit(code) if code else sys.exit(0)
""" % {"step": STEP_S}


@dataclass
class Result:
    scenario: str
    report_ok: bool = False
    exit_expected: int | None = None
    exit_seen: int | None = None
    steps_true: int = 0
    steps_recorded: int = 0
    loss_stated: bool = False
    left_running: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def lost_s(self) -> float:
        return max(0, self.steps_true - self.steps_recorded) * STEP_S

    @property
    def ok(self) -> bool:
        exit_ok = self.exit_expected is None or self.exit_seen == self.exit_expected
        steps_ok = self.lost_s <= 1.0 or self.loss_stated
        return self.report_ok and exit_ok and steps_ok and not self.left_running


class Scenario:
    def __init__(self, root: Path, name: str, marker: str):
        self.dir = root / name
        self.dir.mkdir(parents=True)
        self.out = self.dir / "run"
        self.truth = Path(tempfile.mkdtemp(prefix="truth-")) / "steps"
        self.marker = marker
        self.res = Result(name)

    def cmd(self, seconds: float, mode: str = "plain", *run_args: str, extra: tuple[str, ...] = ()) -> list[str]:
        return [PY, "-m", "gpusleuth", "run", "--no-gpu", "--no-report", "--label", self.marker, "--out",
                str(self.out), *run_args, "--", PY, "-c", JOB, str(self.truth), str(seconds), mode, *extra]

    def wait_started(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.truth.exists() and self.truth.read_bytes().strip():
                return
            time.sleep(0.05)

    def finish(self, exit_seen: int | None, exit_expected: int | None, finalize: bool = False) -> Result:
        r = self.res
        r.exit_seen, r.exit_expected = exit_seen, exit_expected
        _wait_gone(self.marker, 30)  # a job whose launcher was killed runs on to its own end
        _wait_gone(str(self.truth), 5)
        try:
            r.steps_true = int(self.truth.read_bytes().strip() or 0)
        except (OSError, ValueError):
            r.steps_true = 0
        if finalize:
            subprocess.run([PY, "-m", "gpusleuth", "finalize", str(self.out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
        rep = subprocess.run([PY, "-m", "gpusleuth", "report", str(self.out), "--json"], capture_output=True,
                             text=True, timeout=300)
        r.report_ok = rep.returncode == 0 and "Traceback" not in rep.stderr
        if r.report_ok:
            doc = json.loads(rep.stdout)
            r.steps_recorded = int(doc["outcomes"].get("steps") or 0)
            r.loss_stated = any("step" in m and ("missing" in m or "lost" in m or "kept in" in m)
                                for m in doc["losses"])
        else:
            r.note = (rep.stderr.strip().splitlines() or ["?"])[-1][:120]
        r.left_running = _running(self.marker) + _running(str(self.truth))
        for pid in _pids(self.marker) + _pids(str(self.truth)):  # clean up what a failing scenario left
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.truth.parent, ignore_errors=True)
        return r


def _pids(marker: str) -> list[int]:
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmd:
            found.append(int(p.name))
    return found


def _running(marker: str) -> list[str]:
    out = []
    for pid in _pids(marker):
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80])
        except OSError:
            pass
    return out


def _wait_gone(marker: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _pids(marker) and time.monotonic() < deadline:
        time.sleep(0.1)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _recorder_pid(launcher: int) -> int | None:
    for c in _children(launcher):
        try:
            if b"gpusleuth.recorder.process" in Path(f"/proc/{c}/cmdline").read_bytes():
                return c
        except OSError:
            pass
    return None


def _tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def _fill(disk: Path, leave: int) -> None:
    with open(disk / "before", "ab", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            try:
                while os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize - size >= leave:
                    f.write(b"x" * size)
            except OSError:
                pass


# ----------------------------------------------------------------------------------------------- scenarios

def kill9_job(s: Scenario) -> Result:
    p = subprocess.run(s.cmd(10, "kill-self"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return s.finish(p.returncode, 137)


def kill9_recorder(s: Scenario) -> Result:
    p = subprocess.Popen(s.cmd(4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    s.wait_started()
    time.sleep(1.0)
    rec = _recorder_pid(p.pid)
    if rec:
        os.kill(rec, signal.SIGKILL)
    return s.finish(p.wait(timeout=300), 0)


def kill9_launcher(s: Scenario) -> Result:
    p = subprocess.Popen(s.cmd(3), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    s.wait_started()
    time.sleep(1.0)
    p.kill()  # the launcher only: the job runs on to its end; its exit code is nobody's to report
    p.wait()
    return s.finish(None, None, finalize=True)


def _signal_launcher(s: Scenario, sig: int, expected: int, mode: str = "plain") -> Result:
    p = subprocess.Popen(s.cmd(30, mode), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    s.wait_started()
    time.sleep(1.5)
    p.send_signal(sig)
    return s.finish(p.wait(timeout=300), expected)


def sigint(s: Scenario) -> Result:
    return _signal_launcher(s, signal.SIGINT, 130)


def sigterm(s: Scenario) -> Result:
    return _signal_launcher(s, signal.SIGTERM, 143)


def ctrl_c_on_a_pty(s: Scenario) -> Result:
    pid, fd = pty.fork()
    if pid == 0:
        cmd = s.cmd(30)
        os.execv(cmd[0], cmd)
    s.wait_started()
    time.sleep(1.5)
    os.write(fd, b"\x03")  # the terminal's Ctrl-C: SIGINT to the foreground group (the job's)
    deadline = time.monotonic() + 120
    status = None
    while time.monotonic() < deadline:
        try:
            os.read(fd, 65536)
        except OSError:
            pass
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    os.close(fd)
    return s.finish(os.waitstatus_to_exitcode(status) if status is not None else None, 130)


def duration_vs_ignored_sigint(s: Scenario) -> Result:
    p = subprocess.run(s.cmd(60, "ignore-int", "--duration", "2", "--grace", "2"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return s.finish(p.returncode, 143)


def duration_vs_ignored_sigint_and_sigterm(s: Scenario) -> Result:
    p = subprocess.run(s.cmd(60, "ignore-int-term", "--duration", "2", "--grace", "2"),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return s.finish(p.returncode, 137)


def exit_codes(root: Path, marker: str) -> list[Result]:
    out = []
    for code in (0, 1, 2, 3, 42, 100, 125, 126, 127, 128, 254, 255):
        s = Scenario(root, f"exit-{code}", f"{marker}-exit{code}")
        p = subprocess.run(s.cmd(0.5), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300,
                           env={**os.environ, "JOB_EXIT": str(code)})
        out.append(s.finish(p.returncode, code))
    return out


def forks_500(s: Scenario) -> Result:
    p = subprocess.run(s.cmd(12, "forks"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return s.finish(p.returncode, 0)


def setsid_grandchild(s: Scenario) -> Result:
    p = subprocess.run(s.cmd(2, "setsid-grandchild"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return s.finish(p.returncode, 0)


def stdout_flood(s: Scenario, capture: bool) -> Result:
    args = ("--capture-output",) if capture else ()
    p = subprocess.run(s.cmd(2, "flood", *args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return s.finish(p.returncode, 0)


def racing_out(root: Path, marker: str) -> list[Result]:
    s = Scenario(root, "racing-out", marker)
    ps = [subprocess.Popen(s.cmd(1), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
    codes = sorted(p.wait(timeout=300) for p in ps)
    r = s.finish(codes[0], 0)
    r.note = f"exit codes {codes}: exactly one run took the directory" if codes[1] != 0 else "BOTH runs took it"
    if codes[1] == 0:
        r.report_ok = False
    return [r]


def _disk(root: Path, name: str, marker: str, size: str, leave: int | None, fill_mid: bool) -> Result:
    s = Scenario(root, name, marker)
    disk = s.dir / "disk"
    if not _tmpfs(disk, size):
        s.res.note = "skipped: cannot mount a tmpfs (needs root)"
        s.res.report_ok = True
        return s.res
    try:
        if leave is not None:
            _fill(disk, leave)
        s.out = disk / "run"
        mode = "fill" if fill_mid else "plain"
        err = s.dir / "stderr"
        with open(err, "w") as f:
            p = subprocess.run(s.cmd(3, mode, extra=(str(disk / "filler"),)), stdout=subprocess.DEVNULL, stderr=f,
                               timeout=300)
        spilled = [line for line in err.read_text().splitlines() if "kept in" in line]
        r = s.finish(p.returncode, 0)
        if spilled:
            r.loss_stated = True
            r.note = spilled[0][:160]
        return r
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


SCENARIOS = {
    "kill-9-job": kill9_job, "kill-9-recorder": kill9_recorder, "kill-9-launcher": kill9_launcher,
    "sigint": sigint, "sigterm": sigterm, "ctrl-c-pty": ctrl_c_on_a_pty,
    "duration-ignores-sigint": duration_vs_ignored_sigint,
    "duration-ignores-sigint-sigterm": duration_vs_ignored_sigint_and_sigterm,
    "500-forks": forks_500, "setsid-grandchild": setsid_grandchild,
    "stdout-flood-50MB": lambda s: stdout_flood(s, False),
    "stdout-flood-50MB-captured": lambda s: stdout_flood(s, True),
}
GROUPS = {
    "12-exit-codes": exit_codes, "racing-out": racing_out,
    "tiny-fs-4MiB": lambda root, m: [_disk(root, "tiny-fs", m, "4m", None, False)],
    "full-fs-150kB-free": lambda root, m: [_disk(root, "full-150k", m, "4m", 150_000, False)],
    "full-fs-20kB-free": lambda root, m: [_disk(root, "full-20k", m, "4m", 20_000, False)],
    "fs-filled-mid-run": lambda root, m: [_disk(root, "filled-mid", m, "4m", None, True)],
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="comma-separated scenario names")
    ap.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    root = Path(tempfile.mkdtemp(prefix="gpusleuth-faults-"))
    results: list[Result] = []
    t0 = time.monotonic()
    for name, fn in SCENARIOS.items():
        if only is None or name in only:
            results.append(fn(Scenario(root, name, f"gsfault-{os.getpid()}-{name}")))
            _row(results[-1])
    for name, fn in GROUPS.items():
        if only is None or name in only:
            for r in fn(root, f"gsfault-{os.getpid()}-{name}"):
                results.append(r)
                _row(r)
    bad = [r for r in results if not r.ok]
    print(f"\n{len(results) - len(bad)} of {len(results)} scenarios kept the run "
          f"({time.monotonic() - t0:.0f} s, load average {os.getloadavg()[0]:.1f})")
    if args.json:
        args.json.write_text(json.dumps([{**asdict(r), "ok": r.ok, "lost_s": r.lost_s} for r in results], indent=1))
    shutil.rmtree(root, ignore_errors=True)
    return 1 if bad else 0


def _row(r: Result) -> None:
    exit_txt = "n/a" if r.exit_expected is None else f"{r.exit_seen}/{r.exit_expected}"
    print(f"{'ok  ' if r.ok else 'FAIL'} {r.scenario:34} report={'yes' if r.report_ok else 'NO':3} exit={exit_txt:8} "
          f"steps {r.steps_recorded}/{r.steps_true} lost {r.lost_s:.2f}s stated={'yes' if r.loss_stated else 'no':3} "
          f"left={len(r.left_running)} {r.note} {r.left_running[:1] if r.left_running else ''}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
