"""``meta.json``: what ran, where, on what hardware, and how it ended."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, TypedDict, cast

from gpusleuth.run.records import GpuHardware, HostHardware, wrong_fields

META_FILE = "meta.json"
FORMAT_VERSION = 1

# One JSON object as a file held it (a hook record, a log record): untrusted input, read with .get and checked
# where used (run/records.py types the ones the analysis reads). The only Any a Run holds besides the trace
# (tests/test_any_fields.py counts them).
JsonObject = dict[str, Any]


class NodeMeta(TypedDict):
    """One run directory of a job read from several (sources/jobdirs.py)."""

    path: str | None
    clock_offset_ns: int  # subtracted from its times to put them on the first directory's clock
    clock: str  # how the offset was found ("reference clock", "aligned on …")
    ranks: list[int]
    hostname: str | None  # the machine it recorded on: directories of one machine share its host samples


def on_first_host(nodes: list[NodeMeta]) -> list[int]:
    """The directories (indices into ``nodes``) recorded on the machine of the first one, whose host samples a
    merged job holds: the first, and every other with its hostname (none when the first's is unknown)."""
    name = nodes[0].get("hostname") if nodes else None
    return [i for i, n in enumerate(nodes) if i == 0 or (name is not None and n.get("hostname") == name)]


class RecorderMeta(TypedDict, total=False):
    """``meta.json``'s ``recorder`` part: the hardware it saw and what it could not sample."""

    # the hardware as the machine described it: plain scalars only, the declared fields of their declared type
    # (check_meta)
    gpu: list[GpuHardware]  # one description per device (index, name, uuid, memory, MIG parent…)
    host: HostHardware  # cores, memory, cgroup limits
    gpu_note: str | None
    gpu_diagnostics: dict[str, JsonObject]
    errors: dict[str, int]
    interval_s: float


class RunMeta(TypedDict, total=False):
    """``meta.json`` (docs/run-format.md), and the same description of a Run read from any other source. Every
    field may be absent; :func:`check_meta` drops (sets to None) a recorded one of the wrong type."""

    format: int
    gpusleuth_version: str
    source: str | None  # "recorder", "kineto", "nsys", "nvidia-smi", "dcgm", "prometheus", "load", …
    label: str | None
    command: list[str] | None
    cwd: str
    env: dict[str, str]
    python: str
    hostname: str
    interval_s: float | None
    duration_limit_s: float | None
    profile_steps: str | None
    start_ns: int | None
    end_ns: int | None
    exit_code: int | None
    signal: str | None
    stopped_by: str | None
    losses: list[str]
    notes: list[str]
    report_options: dict[str, object]
    recorder: RecorderMeta
    load: dict[str, object]  # `gpusleuth load`'s parameters (url without secrets, mode, levels…)
    # a Run read from a file: where it came from and which rank/device it is
    trace_path: str | None
    device: str | None  # the GPU's name
    rank: int | None
    world_size: int | None
    gpu_index: int | None
    imported_from: dict[str, object]  # `gpusleuth import`: the paths and their format
    ts_scaled_from_ns: bool
    server_run: str
    step_range: str | None
    # an Nsight Systems export: its events, kernels, process, clock and versions
    events: int
    event_phases: dict[str, int]  # a profiler trace's events by phase ("X" complete, "other")
    kernels: int
    pid: int
    clock: str
    nsys_version: str | None
    nsys_schema: str | None
    # a GPU log read by `gpusleuth report`/`import`: its files, fields and rows
    import_files: list[str]
    import_fields: list[str]
    import_rows: int
    import_metric_fields: int  # how many of the fields are metrics gpusleuth reads
    nodes: list[NodeMeta]  # a job read from several run directories: each one's path, clock, ranks


def write_meta(run_dir: Path, meta: Mapping[str, Any]) -> None:
    """Write atomically so a crash never leaves a half-written meta.json."""
    path = Path(run_dir) / META_FILE
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
        os.replace(tmp, path)
    finally:
        if tmp.exists():  # the write failed (disk full): leave the old meta.json, not a partial one
            tmp.unlink()


def read_meta(run_dir: Path, notes: list[str] | None = None) -> RunMeta:
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
    return cast(RunMeta, meta)  # its known fields checked just above


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
        # hardware descriptions feed arithmetic: only plain scalars survive, a declared field of its declared
        # type (run/records.py: set to None where it may be, else left out)
        for part, shape in [(rec.get("host") or {}, HostHardware),
                            *((g, GpuHardware) for g in rec.get("gpu") or [])]:
            for k in [k for k, v in part.items() if not _scalar_ok(v)]:
                problems.append(f"ignored recorder hardware field {k} (not a valid value)")
                part[k] = None
            for k, nullable in wrong_fields(part, shape).items():
                problems.append(f"ignored recorder hardware field {k} (not a valid value)")
                if nullable:
                    part[k] = None
                else:
                    del part[k]
        host = rec.get("host") or {}
        for k in [k for k in _HOST_COUNTS if host.get(k) is not None and not (_is_num(host[k]) and host[k] >= 0)]:
            problems.append(f"ignored recorder host field {k} (not a count)")  # cores × a string
            host[k] = None
    return problems
