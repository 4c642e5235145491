"""Claiming the run directory: a new folder per run, taken atomically, proven writable before the job starts."""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path

from gpusleuth.errors import LaunchError
from gpusleuth.run.layout import RunDir
from gpusleuth.run.meta import META_FILE

WRITE_TEST = ".write-test"  # a probe an older launcher left on a full disk: not a run


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
    meta = RunDir(path).meta_file
    try:
        path.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(meta, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise LaunchError(f"gpusleuth: run directory {path} is not empty; choose another --out") from None
        claimed = True
        try:
            # a probe left by an older launcher that hit a full disk is no run
            if any(p.name not in (META_FILE, WRITE_TEST) for p in path.iterdir()):
                raise LaunchError(f"gpusleuth: run directory {path} is not empty; choose another --out")
            try:
                os.write(fd, b"{}\n")  # replaced by write_meta; proves the disk takes a write
                os.fsync(fd)
            finally:
                os.close(fd)
            (path / WRITE_TEST).unlink(missing_ok=True)
            RunDir(path).raw.mkdir(exist_ok=True)
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
            if not RunDir(path).meta_file.exists():
                raise  # not a race for the name: a disk or permission problem
    raise LaunchError("gpusleuth: could not claim a new run directory under gpusleuth-runs/")
