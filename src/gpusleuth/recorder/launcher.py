"""Launch a job under the recorder, pass signals to it, and end with its exit code.

This module is the lifecycle of one recording; its parts live beside it: claiming the run directory
(``claim.py``), what goes into meta.json (``runmeta.py``), terminal and signal control (``terminal.py``), the
copy of the job's output (``tee.py``) and the recorder process (``supervise.py``).

Job control is done the way a shell does it: the job gets its own process group, and when gpusleuth
runs in a terminal that group is made the terminal's foreground group. So Ctrl-C reaches the job (and
its DataLoader workers) exactly once, straight from the terminal, and an interactive debugger in the
job can still read the keyboard. Signals sent to gpusleuth itself (``kill``, a scheduler's SIGTERM)
are forwarded to the job. ``--duration`` ends the job gracefully: SIGINT, then SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gpusleuth.errors import LaunchError
from gpusleuth.recorder.claim import claim_default_run_dir, default_run_dir, prepare_run_dir
from gpusleuth.recorder.finalize import finalize_run_dir
from gpusleuth.recorder.runmeta import job_name, save_meta, start_meta
from gpusleuth.recorder.leftovers import become_subreaper, end_leftovers
from gpusleuth.recorder.space import merge_spill, release_space, reserve_space, spill_dir, _remove_spill
from gpusleuth.recorder.supervise import read_recorder_status, recorder_died, start_recorder, stop_recorder, tell
from gpusleuth.recorder.tee import OutputTee
from gpusleuth.recorder.terminal import FORWARDED, Terminal, ignores, signal_job
from gpusleuth.run.layout import RunDir
from gpusleuth.run.recording import hold_recording_lock, release_recording_lock

__all__ = ["HOOK_DIR", "LaunchOptions", "LaunchResult", "child_env", "default_run_dir", "launch",
           "prepare_run_dir", "resolve_command"]

HOOK_DIR = Path(__file__).resolve().parents[1] / "hook"


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
    report_options: dict[str, object] = field(default_factory=dict)  # remembered in meta.json for later reports
    prometheus: str | None = None  # [HOST:]PORT: the recorder serves live /metrics there (recorder/exporter.py)
    # polled from the wait loop: once it returns a reason, the job is ended like --duration ends it
    # (SIGINT, SIGTERM, SIGKILL, --grace apart) — `gpusleuth load -- CMD` when its levels are done
    stop_when: Callable[[], str | None] | None = None
    # the recorder's stall watch (recorder/stallwatch.py): "auto", seconds, or "off"; --on-stall dump|kill
    stall_after: str = "auto"
    on_stall: str = "dump"
    # --flight-recorder[=N]: torch's Flight Recorder ring of N collectives per process, unless the job keeps one
    flight_recorder: int | None = None
    # called once the job has ended (how it ended: stopped_by, exit code), before meta.json's last write: what it
    # returns joins meta.json — entries, and notes that become the run's losses (`gpusleuth load` adds its levels
    # this way instead of reading meta.json back and rewriting it)
    final_meta: Callable[[str | None, int], tuple[dict[str, object], list[str]]] | None = None


@dataclass
class LaunchResult:
    run_dir: Path
    exit_code: int
    notes: list[str]
    stopped_by: str | None = None  # what ended the job besides itself (--duration, a signal, stop_when), as in meta.json
    notes_saved: bool = False  # meta.json holds ``notes`` as its losses (else a report must say them)


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


def child_env(opts: LaunchOptions, run_dir: Path, spill: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(opts.extra_env)
    env["GPUSLEUTH_RUN_DIR"] = str(run_dir.resolve())
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(HOOK_DIR) + (os.pathsep + old if old else "")
    if opts.profile_steps:
        env["GPUSLEUTH_PROFILE_STEPS"] = opts.profile_steps
    if opts.flight_recorder:
        flight_recorder_env(env, opts.flight_recorder)
    if spill is not None:
        env["GPUSLEUTH_SPILL_DIR"] = str(spill)
    else:
        env.pop("GPUSLEUTH_SPILL_DIR", None)
    return env


# torch's ring size, in the order torch reads them (hook/_gpusleuth_stall.FR_ENVS): the first one set wins
FR_SIZE_ENVS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")


def flight_recorder_env(env: dict[str, str], size: int) -> bool:
    """Turn torch's Flight Recorder on in the job's environment ``env`` (``--flight-recorder``), unless the job
    sets its ring itself (then it is left as it is: False). ``TORCH_FR_BUFFER_SIZE`` is all gloo and NCCL need
    to keep the ring that the hook dumps on demand at a stall (``_dump_fr_trace``/``_dump_nccl_trace``); on NCCL
    a ring also makes the watchdog write dump files at a timeout or error (``TORCH_NCCL_DUMP_ON_TIMEOUT``,
    default on), which the job did not ask for: off, unless the job's environment says otherwise."""
    if any((env.get(k) or "").strip() for k in FR_SIZE_ENVS):
        return False
    env["TORCH_FR_BUFFER_SIZE"] = str(size)
    env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "0")
    return True


def launch(opts: LaunchOptions) -> LaunchResult:
    if not opts.command:
        raise LaunchError("gpusleuth run: no command given (usage: gpusleuth run [options] -- CMD ARGS…)")
    executable = resolve_command(opts.command[0])
    run_dir = prepare_run_dir(opts.out) if opts.out else claim_default_run_dir(opts.command)
    notes: list[str] = []
    meta = start_meta(opts.command, opts.label, opts.interval_s, opts.duration_s, opts.profile_steps,
                      opts.report_options)
    layout = RunDir(run_dir)
    lock = hold_recording_lock(run_dir)  # readers see a run being recorded, not one whose launcher died
    try:
        layout.write_meta(meta)
    except OSError as exc:
        release_recording_lock(run_dir, lock)
        raise LaunchError(f"gpusleuth: cannot write the run directory {run_dir}: {exc.strerror or exc}") from None

    become_subreaper()  # the job's orphans come to us, to be ended with it (recorder/leftovers.py)
    reserve = reserve_space(run_dir)
    spill = spill_dir(run_dir)
    recorder = start_recorder(run_dir, opts.interval_s, opts.use_gpu, opts.prometheus,
                              opts.label or job_name(opts.command), opts.stall_after, opts.on_stall)
    terminal = Terminal()
    try:
        pipe = subprocess.PIPE if opts.capture_output else None
        job_out = pipe if pipe is not None or not opts.stdout_to_stderr else sys.stderr.fileno()
        child = subprocess.Popen(
            [executable, *opts.command[1:]], env=child_env(opts, run_dir, spill), process_group=0,
            stdout=job_out, stderr=pipe,
        )
    except OSError as exc:
        stop_recorder(recorder, notes)
        release_space(reserve)
        _remove_spill(spill)
        release_recording_lock(run_dir, lock)
        raise LaunchError(f"gpusleuth: cannot start {opts.command[0]}: {exc.strerror or exc}", exit_code=126) from None
    terminal.give(child.pid)
    tell(recorder, f"pid {child.pid}\n", notes)
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    # Copy threads start after the mask so they inherit it: signals stay with the main thread's wait.
    tee = OutputTee(child, layout.output_log, opts.stdout_to_stderr) if opts.capture_output else None
    try:
        returncode, stopped_by = _wait(child, recorder, opts, notes, layout)
        notes.extend(end_leftovers({recorder.pid} if recorder is not None else set()))
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
        if opts.final_meta is not None:
            entries, extra_notes = opts.final_meta(stopped_by, exit_code)
            meta.update(entries)
            notes.extend(extra_notes)
        # The space held since the start is what the run's last writes need on a disk the job filled:
        # the end and exit code first, then the recorder's last rows, the spilled events, Parquet.
        release_space(reserve)
        saved = save_meta(run_dir, meta, notes)
        stop_recorder(recorder, notes)
        notes.extend(merge_spill(spill, run_dir))
        notes.extend(finalize_run_dir(run_dir, meta["end_ns"]))
        status = read_recorder_status(run_dir)
        if status:
            meta["recorder"] = status
        meta["losses"] = notes
        notes_saved = save_meta(run_dir, meta, [])
        if not notes_saved and saved:
            notes.append("could not rewrite meta.json with these notes (its end and exit code are saved): "
                         "they are only in this report")
        release_recording_lock(run_dir, lock)
    finally:
        for s, handler in ignored.items():
            signal.signal(s, handler)
    return LaunchResult(run_dir=run_dir, exit_code=exit_code, notes=notes, stopped_by=stopped_by,
                        notes_saved=notes_saved)


def _wait(child: subprocess.Popen[bytes], recorder: subprocess.Popen[bytes] | None, opts: LaunchOptions, notes: list[str],
          layout: RunDir | None = None) -> tuple[int, str | None]:
    deadline = time.monotonic() + opts.duration_s if opts.duration_s else None
    escalation = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
    next_escalation = None
    stopped_by = None
    while True:
        rc = child.poll()
        if rc is not None:
            return rc, stopped_by
        if recorder is not None and recorder.poll() is not None:
            recorder_died(recorder, notes)
        if opts.on_tick is not None:
            try:
                opts.on_tick()
            except Exception:  # noqa: BLE001 - a display bug must never stop us supervising the job
                opts.on_tick = None
        now = time.monotonic()
        asked = opts.stop_when() if opts.stop_when is not None and next_escalation is None else None
        if (not asked and next_escalation is None and opts.on_stall == "kill" and layout is not None
                and layout.stall_stop.exists()):
            asked = "--on-stall kill"  # the recorder saw a stall and saved the stacks: end the job
        if asked:
            deadline, stopped_by = now, stopped_by or asked
        if deadline is not None and now >= deadline and (next_escalation is None or now >= next_escalation):
            while len(escalation) > 1 and ignores(child.pid, escalation[0]):
                escalation.pop(0)  # the job inherited SIG_IGN for it: waiting --grace for nothing
            if escalation:
                sig = escalation.pop(0)
                stopped_by = stopped_by or f"--duration {opts.duration_s:g}s"
                signal_job(child, sig, group=sig == signal.SIGKILL)
                next_escalation = now + opts.grace_s
        info = signal.sigtimedwait(FORWARDED, 0.05)
        if info is not None:
            stopped_by = stopped_by or f"{signal.Signals(info.si_signo).name} to gpusleuth"
            signal_job(child, info.si_signo, group=False)


