"""Processes a job leaves running when it ends (daemons, ``setsid`` grandchildren), ended with it.

Why: a job's daemonized helper (a compile-worker pool, a leaked loader, a ``setsid`` server) escapes the
job's process group, so neither the terminal's Ctrl-C nor ``--duration``'s signals reach it, and it kept
running after ``gpusleuth run`` returned. The launcher makes itself the *child subreaper*
(``PR_SET_CHILD_SUBREAPER``, as tini and systemd do): every orphan of the job is reparented to it instead of
to init, so when the job has ended the launcher finds them among its own children, asks them to stop
(SIGTERM), kills what is left after a grace period, reaps them, and says which they were.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

PR_SET_CHILD_SUBREAPER = 36
GRACE_S = 2.0


def become_subreaper() -> bool:
    """Adopt the job's orphans (Linux ≥ 3.4); False where the call is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def end_leftovers(keep: set[int]) -> list[str]:
    """End every process below us except ``keep`` (the recorder) and its subtree; a note naming them."""
    import psutil

    try:
        me = psutil.Process()
        kept = set(keep)
        for pid in keep:
            try:
                kept |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
            except psutil.Error:
                pass
        procs = [p for p in me.children(recursive=True) if p.pid not in kept]
    except psutil.Error:
        return []
    alive, names = [], []
    for p in procs:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            names.append(f"{p.pid} ({' '.join(p.cmdline())[:60] or p.name()})")
            p.send_signal(signal.SIGTERM)
            alive.append(p)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(alive, timeout=GRACE_S)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=GRACE_S)
    _reap([p.pid for p in procs])
    if not names:
        return []
    return [f"the job left {len(names)} process(es) running when it ended (daemonized or setsid, out of its "
            f"process group): ended with it — {', '.join(names[:5])}{' …' if len(names) > 5 else ''}"]


def _reap(pids: list[int]) -> None:
    """Collect the exit status of our adopted children so none stays a zombie."""
    deadline = time.monotonic() + GRACE_S
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break  # not our child (its own parent reaps it) or already reaped
            if done:
                break
            time.sleep(0.01)
