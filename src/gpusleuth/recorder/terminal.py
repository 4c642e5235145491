"""Job control, the way a shell does it: the terminal's foreground handed to the job's process group and
taken back, signals sent to the job, and whether the job ignores one."""

from __future__ import annotations

import os
import signal
import subprocess

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


class Terminal:
    """Hands the terminal's foreground to the job's process group and takes it back afterwards."""

    def __init__(self) -> None:
        self.fd: int | None = None
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


def ignores(pid: int, sig: int) -> bool:
    """Whether process ``pid`` ignores ``sig`` (``SigIgn`` in /proc; False where that cannot be read)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def signal_job(child: subprocess.Popen[bytes], sig: int, group: bool) -> None:
    try:
        if group:
            os.killpg(child.pid, sig)
        else:
            child.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass
