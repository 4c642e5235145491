"""Errors that reach the user as one clear line, never a traceback.

Every problem with a user's input is an :class:`InputError` naming the file and what was wrong; the CLI
prints it and exits non-zero. Anything else escaping is a bug in gpusleuth.
"""

from __future__ import annotations

from pathlib import Path


class GpusleuthError(Exception):
    """Base class for errors the CLI reports without a traceback."""

    exit_code = 2


class InputError(GpusleuthError):
    """A file the user gave us cannot be read as what it should be."""

    def __init__(self, path: str | Path, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class LaunchError(GpusleuthError):
    """The job could not be started (unknown command, unwritable run directory…)."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
