"""The job's output copied to ours and into ``output.log``, never blocking the job."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO


class OutputTee:
    """Copy the job's stdout and stderr to ours, byte for byte, and into one log file.

    The copy never stops before the job's pipes close: a log write that fails (disk full, quota) ends the
    log, not the draining — a copy thread that died there left the job blocked writing to a pipe nobody
    read, forever. What the log missed is said in :attr:`notes`."""

    def __init__(self, child: subprocess.Popen[bytes], path: Path, stdout_to_stderr: bool = False):
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

    def _pump(self, src: IO[bytes], dst: IO[bytes]) -> None:
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
