"""``meta.json``: what ran, where, on what hardware, and how it ended."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

META_FILE = "meta.json"
FORMAT_VERSION = 1


def write_meta(run_dir: Path, meta: dict[str, Any]) -> None:
    """Write atomically so a crash never leaves a half-written meta.json."""
    path = Path(run_dir) / META_FILE
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
        os.replace(tmp, path)
    finally:
        if tmp.exists():  # the write failed (disk full): leave the old meta.json, not a partial one
            tmp.unlink()


def read_meta(run_dir: Path, notes: list[str] | None = None) -> dict[str, Any]:
    """meta.json as a dict whose known fields have their documented types (docs/run-format.md). A field of
    the wrong type (hand-edited, damaged) is dropped and said in ``notes`` rather than failing later."""
    from gpusleuth.errors import InputError

    from gpusleuth.run.files import open_regular

    path = Path(run_dir) / META_FILE
    try:
        os.lstat(path)
    except FileNotFoundError:
        raise InputError(run_dir, "not a gpusleuth run directory (no meta.json)") from None
    except OSError as exc:  # a directory the user may not enter: Path.exists() raised PermissionError
        raise InputError(run_dir, f"cannot be read ({exc.strerror or exc}: you may not enter this "
                                  "directory)") from None
    try:
        with open_regular(path, "a JSON file") as f:
            meta = json.loads(f.read())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InputError(path, f"meta.json is not valid JSON ({exc})") from None
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    if not isinstance(meta, dict):
        raise InputError(path, "meta.json must hold a JSON object")
    problems = check_meta(meta)
    if notes is not None:
        notes.extend(f"meta.json: {p}" for p in problems)
    return meta


# Time stamps are epoch nanoseconds: anything outside (0, 2**62) — year 2116 — is damage.
_MAX_NS = 2**62


def _is_ns(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < _MAX_NS


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 1e15


_STR = lambda v: isinstance(v, str)  # noqa: E731
_CHECKS: dict[str, Any] = {
    "format": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "gpusleuth_version": _STR, "source": _STR, "label": _STR, "cwd": _STR, "python": _STR, "hostname": _STR,
    "command": lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
    "env": lambda v: isinstance(v, dict), "report_options": lambda v: isinstance(v, dict),
    "interval_s": lambda v: _is_num(v) and v > 0, "duration_limit_s": lambda v: _is_num(v) and v > 0,
    "start_ns": _is_ns, "end_ns": _is_ns,
    "exit_code": lambda v: isinstance(v, int) and not isinstance(v, bool) and -512 < v < 512,
    "signal": _STR, "stopped_by": _STR,
    "losses": lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
    "recorder": lambda v: isinstance(v, dict),
    "load": lambda v: isinstance(v, dict),  # `gpusleuth load` parameters (url without secrets, mode, levels…)
}
_RECORDER_CHECKS: dict[str, Any] = {
    "gpu": lambda v: isinstance(v, list) and all(isinstance(g, dict) for g in v),
    "host": lambda v: isinstance(v, dict), "gpu_note": _STR, "errors": lambda v: isinstance(v, dict),
    "interval_s": lambda v: _is_num(v) and v > 0,
}


# host fields that analysis multiplies and divides by
_HOST_COUNTS = ("logical_cores", "physical_cores", "cpu_affinity_cores", "mem_total", "cgroup_version",
                "cgroup_cpu_limit_cores", "cgroup_mem_limit")


def _scalar_ok(v: Any) -> bool:
    return v is None or isinstance(v, (str, bool)) or _is_num(v) or (isinstance(v, int) and abs(v) < 2**63)


def check_meta(meta: dict[str, Any]) -> list[str]:
    """Drop (set to None) every known field whose type is wrong; returns what was dropped."""
    problems = []
    for key, ok in _CHECKS.items():
        v = meta.get(key)
        if v is not None and not ok(v):
            problems.append(f"ignored {key}={json.dumps(v, default=str)[:40]} (not a valid value)")
            meta[key] = None
    if meta.get("end_ns") and meta.get("start_ns") and meta["end_ns"] < meta["start_ns"]:
        problems.append("ignored end_ns (before start_ns)")
        meta["end_ns"] = None
    rec = meta.get("recorder")
    if isinstance(rec, dict):
        for key, ok in _RECORDER_CHECKS.items():
            v = rec.get(key)
            if v is not None and not ok(v):
                problems.append(f"ignored recorder.{key} (not a valid value)")
                rec[key] = None
        # hardware descriptions feed arithmetic: only plain scalars survive
        for part in [rec.get("host") or {}, *(rec.get("gpu") or [])]:
            for k in [k for k, v in part.items() if not _scalar_ok(v)]:
                problems.append(f"ignored recorder hardware field {k} (not a valid value)")
                part[k] = None
        host = rec.get("host") or {}
        for k in [k for k in _HOST_COUNTS if host.get(k) is not None and not (_is_num(host[k]) and host[k] >= 0)]:
            problems.append(f"ignored recorder host field {k} (not a count)")  # cores × a string
            host[k] = None
    return problems
