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
from gpusleuth.recorder.space import merge_spill, release_space, reserve_space, spill_dir, _remove_spill
from gpusleuth.run.meta import FORMAT_VERSION, META_FILE, write_meta

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
    """Claim the run directory for this run and prove it is writable before the job starts.

    The claim is one atomic step: ``meta.json`` is created with ``O_EXCL``, so of two runs given the same
    ``--out`` at the same moment exactly one gets it (checking for emptiness and then creating raced: 25–52
    of 300 simultaneous pairs both went ahead). The claim's first bytes are the write probe."""
    path = Path(path)
    meta = path / META_FILE
    try:
        path.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(meta, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise LaunchError(f"gpusleuth: run directory {path} is not empty; choose another --out") from None
        claimed = True
        try:
            # a probe left by an older launcher that hit a full disk is no run
            if any(p.name not in (META_FILE, ".write-test") for p in path.iterdir()):
                raise LaunchError(f"gpusleuth: run directory {path} is not empty; choose another --out")
            try:
                os.write(fd, b"{}\n")  # replaced by write_meta; proves the disk takes a write
                os.fsync(fd)
            finally:
                os.close(fd)
            (path / ".write-test").unlink(missing_ok=True)
            (path / "raw").mkdir(exist_ok=True)
            claimed = False
        finally:
            if claimed:
                meta.unlink(missing_ok=True)
    except PermissionError as exc:
        raise LaunchError(f"gpusleuth: cannot write the run directory {path}: {exc.strerror}") from None
    except OSError as exc:
        if isinstance(exc, LaunchError):
            raise
        raise LaunchError(f"gpusleuth: cannot create the run directory {path}: {exc.strerror or exc}") from None
    return path


def claim_default_run_dir(command: list[str], kind: str = "") -> Path:
    """A new folder under ./gpusleuth-runs/ claimed for this run: a name another run took in the same
    second (the same command started twice at once) moves on to the next number."""
    for _ in range(1000):
        path = default_run_dir(command, kind)
        try:
            return prepare_run_dir(path)
        except LaunchError:
            if not (path / META_FILE).exists():
                raise  # not a race for the name: a disk or permission problem
    raise LaunchError("gpusleuth: could not claim a new run directory under gpusleuth-runs/")


def child_env(opts: LaunchOptions, run_dir: Path, spill: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(opts.extra_env)
    env["GPUSLEUTH_RUN_DIR"] = str(run_dir.resolve())
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(HOOK_DIR) + (os.pathsep + old if old else "")
    if opts.profile_steps:
        env["GPUSLEUTH_PROFILE_STEPS"] = opts.profile_steps
    if spill is not None:
        env["GPUSLEUTH_SPILL_DIR"] = str(spill)
    else:
        env.pop("GPUSLEUTH_SPILL_DIR", None)
    return env


def _save_meta(run_dir: Path, meta: dict, notes: list[str]) -> bool:
    try:
        write_meta(run_dir, meta)
        return True
    except OSError as exc:
        notes.append(f"could not write meta.json ({exc.strerror or exc}): the run's end and exit code "
                     f"(exit code {meta.get('exit_code')}) are not saved; `gpusleuth report` takes the end "
                     "from the last sample")
        return False


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
    run_dir = prepare_run_dir(opts.out) if opts.out else claim_default_run_dir(opts.command)
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

    reserve = reserve_space(run_dir)
    spill = spill_dir(run_dir)
    recorder = _start_recorder(run_dir, opts)
    terminal = _Terminal()
    try:
        pipe = subprocess.PIPE if opts.capture_output else None
        job_out = pipe if pipe is not None or not opts.stdout_to_stderr else sys.stderr.fileno()
        child = subprocess.Popen(
            [executable, *opts.command[1:]], env=child_env(opts, run_dir, spill), process_group=0,
            stdout=job_out, stderr=pipe,
        )
    except OSError as exc:
        _stop_recorder(recorder, notes)
        release_space(reserve)
        _remove_spill(spill)
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
            notes.extend(tee.notes)
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
        # The space held since the start is what the run's last writes need on a disk the job filled:
        # the end and exit code first, then the recorder's last rows, the spilled events, Parquet.
        release_space(reserve)
        saved = _save_meta(run_dir, meta, notes)
        _stop_recorder(recorder, notes)
        notes.extend(merge_spill(spill, run_dir))
        notes.extend(finalize_run_dir(run_dir, meta["end_ns"]))
        status = _read_recorder_status(run_dir)
        if status:
            meta["recorder"] = status
        meta["losses"] = notes
        if not _save_meta(run_dir, meta, []) and saved:
            notes.append("could not rewrite meta.json with these notes (its end and exit code are saved): "
                         "they are only in this report")
    finally:
        for s, handler in ignored.items():
            signal.signal(s, handler)
    return LaunchResult(run_dir=run_dir, exit_code=exit_code, notes=notes)


class _Tee:
    """Copy the job's stdout and stderr to ours, byte for byte, and into one log file.

    The copy never stops before the job's pipes close: a log write that fails (disk full, quota) ends the
    log, not the draining — a copy thread that died there left the job blocked writing to a pipe nobody
    read, forever. What the log missed is said in :attr:`notes`."""

    def __init__(self, child: subprocess.Popen, path: Path, stdout_to_stderr: bool = False):
        import threading

        self.path = path
        self._log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._start = os.fstat(self._log).st_size
        self._logged = 0  # bytes the log holds
        self._missed = 0  # bytes the log could not take
        self._log_error: str | None = None
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
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            try:
                dst.write(chunk)
                dst.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass
            self._to_log(chunk)

    def _to_log(self, chunk: bytes) -> None:
        with self._lock:
            if self._log_error is None:
                try:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(self._log, view):]
                    self._logged += len(chunk)
                    return
                except OSError as exc:
                    self._log_error = exc.strerror or str(exc)
                    try:  # the log ends at a whole chunk, not inside one
                        os.ftruncate(self._log, self._start + self._logged)
                    except OSError:
                        pass
            self._missed += len(chunk)

    @property
    def notes(self) -> list[str]:
        if self._log_error is None:
            return []
        return [f"{self.path.name} is incomplete: it could not be written after {self._logged:,} bytes "
                f"({self._log_error}); the job's remaining {self._missed:,} bytes of output still went to "
                "gpusleuth's own output"]

    def join(self) -> None:
        for t in self._threads:
            t.join(timeout=10)
        os.close(self._log)


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
