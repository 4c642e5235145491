"""Run summaries on disk, for ``gpusleuth fleet``: a run's own ``summary.json`` (left by the verb that recorded
it: ``recorder/summary.py``) and the cache of summaries computed for runs without one.

Why a cache outside the run: reading a run never writes it, yet a fleet of 10,000 runs must not re-run every
analysis to draw one table. A summary ``fleet`` computes for a run without one (recorded with
``--no-report``, or read-only) is kept under ``$GPUSLEUTH_CACHE_DIR`` (default ``$XDG_CACHE_HOME/gpusleuth``,
i.e. ``~/.cache/gpusleuth``), keyed by the run's real path and a fingerprint of its files, so a run that
changes is summarized again. Like ``ledger/sources/fleet_cache.py``, this module is the cache's one reader and writer;
the records are ``report/summary.RunSummary.to_dict()``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from gpusleuth.run.layout import RunDir


def read_summary(run_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The run's own ``summary.json``, else the one cached for it (None: neither); the second value says
    why a summary.json there is unreadable (that run is then left out, said in one line)."""
    path = RunDir(run_dir).summary
    try:
        rec = json.loads(path.read_bytes())
    except FileNotFoundError:
        return read_cached_summary(run_dir), None
    except (OSError, ValueError) as exc:
        return None, f"{path}: unreadable ({exc.__class__.__name__}); left out"
    if not isinstance(rec, dict):
        return None, f"{path}: unreadable (not a JSON object); left out"
    return rec, None


def cache_root() -> Path:
    """Where summaries computed for runs without one are kept (never inside the run)."""
    root = os.environ.get("GPUSLEUTH_CACHE_DIR")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gpusleuth")
    return Path(root) / "summaries"


def _cache_path(run_dir: Path) -> Path | None:
    """The cache file for the run as it is now: its real path and the name, size and time of each of its
    top-level files and of ``raw/``'s (a run that was finalized, appended to or edited gets a new key)."""
    h = hashlib.sha256(os.path.realpath(run_dir).encode("utf-8", "surrogateescape"))
    try:
        for where in (Path(run_dir), Path(run_dir) / "raw"):
            if where.name == "raw" and not where.is_dir():
                continue
            with os.scandir(where) as it:
                for e in sorted(it, key=lambda e: e.name):
                    st = e.stat(follow_symlinks=False)
                    h.update(f"{e.name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode("utf-8", "surrogateescape"))
    except OSError:
        return None
    return cache_root() / f"{h.hexdigest()[:40]}.json"


def read_cached_summary(run_dir: Path) -> dict[str, Any] | None:
    path = _cache_path(run_dir)
    if path is None:
        return None
    try:
        rec = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def cache_summary_outside(run_dir: Path, record: dict[str, Any]) -> bool:
    """Keep a computed summary in the cache (False when the cache cannot be written: computed next time)."""
    path = _cache_path(run_dir)
    if path is None:
        return False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, default=str) + "\n")
        os.replace(tmp, path)
    except OSError:
        return False
    return True
