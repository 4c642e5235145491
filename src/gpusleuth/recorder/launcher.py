"""Launch a job under the recorder, pass signals to it, and end with its exit code.

Job control is done the way a shell does it: the job gets its own process group, and when gpusleuth
runs in a terminal that group is made the terminal's foreground group. So Ctrl-C reaches the job (and
its DataLoader workers) exactly once, straight from the terminal, and an interactive debugger in the
job can still read the keyboard. Signals sent to gpusleuth itself (``kill``, a scheduler's SIGTERM)
are forwarded to the job. ``--duration`` ends the job gracefully: SIGINT, then SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from gpusleuth._version import __version__
from gpusleuth.errors import LaunchError
from gpusleuth.recorder.finalize import finalize_run_dir
from gpusleuth.run.meta import FORMAT_VERSION, write_meta

HOOK_DIR = Path(__file__).resolve().parents[1] / "hook"
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
# Environment variables worth keeping in meta.json: they change how a job performs.
ENV_KEEP = re.compile(
    r"^(CUDA_|NCCL_|TORCH|PYTORCH_|OMP_|MKL_|WORLD_SIZE$|RANK$|LOCAL_RANK$|MASTER_|SLURM_JOB|"
    r"NVIDIA_VISIBLE_DEVICES$|KMP_|TF32|GPUSLEUTH_)"
)


@dataclass
class LaunchOptions:
    command: list[str]
    out: Path | None = None
    interval_s: float = 0.1
    duration_s: float | None = None
    grace_s: float = 10.0  # between SIGINT, SIGTERM and SIGKILL when --duration ends the job
    profile_steps: str | None = None
    use_gpu: bool = True
    label: str | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    capture_output: bool = False  # tee the job's stdout/stderr into output.log (MLLOG lines…)
    # the job's stdout goes to our stderr: `gpusleuth run --json > out.json` keeps stdout for the JSON alone
    stdout_to_stderr: bool = False
    on_tick: Callable[[], None] | None = None  # called from the wait loop (~20 Hz): the --live view
    report_options: dict = field(default_factory=dict)  # remembered in meta.json for later reports
    prometheus: str | None = None  # [HOST:]PORT: the recorder serves live /metrics there (recorder/exporter.py)
    # polled from the wait loop: once it returns a reason, the job is ended like --duration ends it
    # (SIGINT, SIGTERM, SIGKILL, --grace apart) — `gpusleuth load -- CMD` when its levels are done
    stop_when: Callable[[], str | None] | None = None


@dataclass
class LaunchResult:
    run_dir: Path
    exit_code: int
    notes: list[str]


def resolve_command(argv0: str) -> str:
    """Find the program the way a shell would; fail before anything starts if it can't run."""
    if "/" in argv0:
        path = Path(argv0)
        if not path.exists():
            raise LaunchError(f"gpusleuth: {argv0}: no such file", exit_code=127)
        if path.is_dir() or not os.access(path, os.X_OK):
            raise LaunchError(f"gpusleuth: {argv0}: permission denied (not an executable file)", exit_code=126)
        return str(path)
    found = shutil.which(argv0)
    if not found:
        raise LaunchError(f"gpusleuth: {argv0}: command not found", exit_code=127)
    return found


def default_run_dir(command: list[str], kind: str = "") -> Path:
    """A new folder under ./gpusleuth-runs/ named by UTC time, an optional kind ("sweep") and the command."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    words = [Path(c).name for c in command[:3] if not c.startswith("-")]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(words))[:40] or "job"
    base = Path("gpusleuth-runs") / f"{stamp}-{kind + '-' if kind else ''}{slug}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def prepare_run_dir(path: Path) -> Path:
    """Create the run directory and prove it is writable before the job starts."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        if any(p.name != probe.name for p in path.iterdir()):  # a probe left by a full disk is no run
            raise LaunchError(f"gpusleuth: run directory {path} is not empty; choose another --out")
        try:
            probe.write_text("ok")
        finally:
            probe.unlink(missing_ok=True)
        (path / "raw").mkdir(exist_ok=True)
    except PermissionError as exc:
        raise LaunchError(f"gpusleuth: cannot write the run directory {path}: {exc.strerror}") from None
    except OSError as exc:
        if isinstance(exc, LaunchError):
            raise
        raise LaunchError(f"gpusleuth: cannot create the run directory {path}: {exc.strerror or exc}") from None
    return path


def child_env(opts: LaunchOptions, run_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(opts.extra_env)
    env["GPUSLEUTH_RUN_DIR"] = str(run_dir.resolve())
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(HOOK_DIR) + (os.pathsep + old if old else "")
    if opts.profile_steps:
        env["GPUSLEUTH_PROFILE_STEPS"] = opts.profile_steps
    return env


class _Terminal:
    """Hands the terminal's foreground to the job's process group and takes it back afterwards."""

    def __init__(self):
        self.fd = None
        try:
            fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
        except OSError:
            return
        try:
            if os.tcgetpgrp(fd) == os.getpgrp():
                self.fd = fd
            else:
                os.close(fd)
        except OSError:
            os.close(fd)

    def give(self, pgid: int) -> None:
        if self.fd is not None:
            try:
                os.tcsetpgrp(self.fd, pgid)
            except OSError:
                pass

    def take_back(self) -> None:
        if self.fd is None:
            return
        old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        try:
            os.tcsetpgrp(self.fd, os.getpgrp())
        except OSError:
            pass
        finally:
            signal.signal(signal.SIGTTOU, old)
            os.close(self.fd)
            self.fd = None


def launch(opts: LaunchOptions) -> LaunchResult:
    if not opts.command:
        raise LaunchError("gpusleuth run: no command given (usage: gpusleuth run [options] -- CMD ARGS…)")
    executable = resolve_command(opts.command[0])
    run_dir = prepare_run_dir(opts.out or default_run_dir(opts.command))
    notes: list[str] = []
    meta = {
        "format": FORMAT_VERSION,
        "gpusleuth_version": __version__,
        "source": "recorder",
        "label": opts.label,
        "command": opts.command,
        "cwd": os.getcwd(),
        "env": {k: v for k, v in os.environ.items() if ENV_KEEP.match(k)},
        "python": sys.version.split()[0],
        "hostname": os.uname().nodename,
        "interval_s": opts.interval_s,
        "duration_limit_s": opts.duration_s,
        "profile_steps": opts.profile_steps,
        "start_ns": time.time_ns(),
        "end_ns": None,
        "exit_code": None,
        "signal": None,
        "stopped_by": None,
        "report_options": opts.report_options,
    }
    try:
        write_meta(run_dir, meta)
    except OSError as exc:
        raise LaunchError(f"gpusleuth: cannot write the run directory {run_dir}: {exc.strerror or exc}") from None

    recorder = _start_recorder(run_dir, opts)
    terminal = _Terminal()
    try:
        pipe = subprocess.PIPE if opts.capture_output else None
        job_out = pipe if pipe is not None or not opts.stdout_to_stderr else sys.stderr.fileno()
        child = subprocess.Popen(
            [executable, *opts.command[1:]], env=child_env(opts, run_dir), process_group=0,
            stdout=job_out, stderr=pipe,
        )
    except OSError as exc:
        _stop_recorder(recorder, notes)
        raise LaunchError(f"gpusleuth: cannot start {opts.command[0]}: {exc.strerror or exc}", exit_code=126) from None
    terminal.give(child.pid)
    _tell(recorder, f"pid {child.pid}\n", notes)
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    # Copy threads start after the mask so they inherit it: signals stay with the main thread's wait.
    tee = _Tee(child, run_dir / "output.log", opts.stdout_to_stderr) if opts.capture_output else None
    try:
        returncode, stopped_by = _wait(child, recorder, opts, notes)
        if tee is not None:
            tee.join()
    finally:
        # The job is over: a late Ctrl-C (to the whole group, or pressed twice) must neither cut the
        # finalization short nor print a traceback; signals still pending are discarded with the mask.
        ignored = {s: signal.signal(s, signal.SIG_IGN) for s in FORWARDED}
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        terminal.take_back()
    try:
        meta["end_ns"] = time.time_ns()
        if returncode < 0:
            meta["signal"] = signal.Signals(-returncode).name
            exit_code = 128 - returncode
        else:
            exit_code = returncode
        meta["exit_code"] = exit_code
        meta["stopped_by"] = stopped_by
        _stop_recorder(recorder, notes)
        notes.extend(finalize_run_dir(run_dir, meta["end_ns"]))
        status = _read_recorder_status(run_dir)
        if status:
            meta["recorder"] = status
        meta["losses"] = notes
        try:
            write_meta(run_dir, meta)
        except OSError as exc:
            notes.append(f"could not write meta.json ({exc.strerror or exc}): the run's end and exit code are "
                         "not saved; `gpusleuth report` takes the end from the last sample")
    finally:
        for s, handler in ignored.items():
            signal.signal(s, handler)
    return LaunchResult(run_dir=run_dir, exit_code=exit_code, notes=notes)


class _Tee:
    """Copy the job's stdout and stderr to ours, byte for byte, and into one log file."""

    def __init__(self, child: subprocess.Popen, path: Path, stdout_to_stderr: bool = False):
        import threading

        self._log = open(path, "ab")
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._pump, args=(src, dst), daemon=True)
            for src, dst in ((child.stdout, sys.stderr.buffer if stdout_to_stderr else sys.stdout.buffer),
                             (child.stderr, sys.stderr.buffer))
        ]
        for t in self._threads:
            t.start()

    def _pump(self, src, dst) -> None:
        fd = src.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            try:
                dst.write(chunk)
                dst.flush()
            except (BrokenPipeError, OSError):
                pass
            with self._lock:
                self._log.write(chunk)
                self._log.flush()

    def join(self) -> None:
        for t in self._threads:
            t.join(timeout=10)
        self._log.close()


def job_name(command: list[str]) -> str:
    """What a person calls this job: the script or module a Python command (or a launcher such as torchrun,
    accelerate launch, deepspeed) runs, else the program."""
    program = Path(command[0]).name
    scripts = [Path(a).name for a in command[1:] if a.endswith(".py")]
    if program.startswith("python"):
        args = command[1:]
        for i, a in enumerate(args):
            if a == "-m" and i + 1 < len(args):
                return scripts[0] if args[i + 1] in LAUNCHERS and scripts else args[i + 1]
            if not a.startswith("-"):
                return Path(a).name
    elif program in LAUNCHERS and scripts:
        return scripts[0]
    return program


LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "accelerate", "deepspeed",
             "lightning", "composer")


def _start_recorder(run_dir: Path, opts: LaunchOptions) -> subprocess.Popen | None:
    cmd = [sys.executable, "-m", "gpusleuth.recorder.process", "--run-dir", str(run_dir),
           "--interval", str(opts.interval_s)]
    if not opts.use_gpu:
        cmd.append("--no-gpu")
    if opts.prometheus:
        cmd += ["--prometheus", opts.prometheus, "--job", opts.label or job_name(opts.command)]
    log = open(run_dir / "recorder.log", "ab")
    try:
        return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=log, start_new_session=True)
    except OSError:
        return None
    finally:
        log.close()


def _tell(recorder, line: str, notes: list[str]) -> None:
    if recorder is None or recorder.stdin is None:
        return
    try:
        recorder.stdin.write(line.encode())
        recorder.stdin.flush()
    except (BrokenPipeError, OSError):
        pass


def _recorder_died(recorder, notes: list[str]) -> None:
    msg = (f"the recorder process exited early (code {recorder.returncode}); telemetry after that moment "
           f"is missing (see recorder.log)")
    if msg not in notes:
        notes.append(msg)


def _wait(child: subprocess.Popen, recorder, opts: LaunchOptions, notes: list[str]) -> tuple[int, str | None]:
    deadline = time.monotonic() + opts.duration_s if opts.duration_s else None
    escalation = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
    next_escalation = None
    stopped_by = None
    while True:
        rc = child.poll()
        if rc is not None:
            return rc, stopped_by
        if recorder is not None and recorder.poll() is not None:
            _recorder_died(recorder, notes)
        if opts.on_tick is not None:
            try:
                opts.on_tick()
            except Exception:  # noqa: BLE001 - a display bug must never stop us supervising the job
                opts.on_tick = None
        now = time.monotonic()
        asked = opts.stop_when() if opts.stop_when is not None and next_escalation is None else None
        if asked:
            deadline, stopped_by = now, stopped_by or asked
        if deadline is not None and now >= deadline and (next_escalation is None or now >= next_escalation):
            while len(escalation) > 1 and _ignores(child.pid, escalation[0]):
                escalation.pop(0)  # the job inherited SIG_IGN for it: waiting --grace for nothing
            if escalation:
                sig = escalation.pop(0)
                stopped_by = stopped_by or f"--duration {opts.duration_s:g}s"
                _signal_job(child, sig, group=sig == signal.SIGKILL)
                next_escalation = now + opts.grace_s
        info = signal.sigtimedwait(FORWARDED, 0.05)
        if info is not None:
            stopped_by = stopped_by or f"{signal.Signals(info.si_signo).name} to gpusleuth"
            _signal_job(child, info.si_signo, group=False)


def _ignores(pid: int, sig: int) -> bool:
    """Whether process ``pid`` ignores ``sig`` (``SigIgn`` in /proc; False where that cannot be read)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _signal_job(child: subprocess.Popen, sig: int, group: bool) -> None:
    try:
        if group:
            os.killpg(child.pid, sig)
        else:
            child.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass


def _stop_recorder(recorder, notes: list[str]) -> None:
    if recorder is None:
        notes.append("the recorder could not be started: no telemetry was recorded")
        return
    if recorder.poll() is not None:
        _recorder_died(recorder, notes)
        return
    _tell(recorder, "stop\n", notes)
    try:
        recorder.stdin.close()
    except OSError:
        pass
    try:
        recorder.wait(timeout=10)
    except subprocess.TimeoutExpired:
        recorder.kill()
        recorder.wait()
        notes.append("the recorder did not stop within 10 s and was killed; its last second may be missing")


def _read_recorder_status(run_dir: Path) -> dict | None:
    import json

    path = run_dir / "recorder.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
