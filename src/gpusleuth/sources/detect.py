"""Recognise what a file is by its content (never its name) and read it with the right source.

``sniff(path)`` names the format; ``load_file(path, options)`` returns the Runs it holds (one per GPU
log, one per rank/device for traces). Formats: a Kineto trace (JSON, plain or gzip), an Nsight Systems
SQLite export, ``nvidia-smi --query-gpu`` CSV (header or not), ``nvidia-smi dmon``, Prometheus text
scrapes (dcgm-exporter, nvidia_gpu_exporter) and Prometheus ``query_range`` JSON.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from gpusleuth.errors import InputError
from gpusleuth.run.meta import RunMeta
from gpusleuth.run.model import Run

SQLITE_MAGIC = b"SQLite format 3\x00"
_SNIFF = 4 << 20


@dataclass
class ImportOptions:
    """What a file cannot say about itself, given on the command line (all optional)."""

    fields: list[str] | None = None  # --fields: the --query-gpu list of a noheader log
    tz: str | None = None  # --tz: zone of nvidia-smi's local timestamps
    start_ns: int | None = None  # --start: when a dmon log without timestamps began
    interval_s: float = 1.0  # --interval: dmon's -d
    step_range: str | None = None  # --step-range: the NVTX range that marks a training step (nsys)


def sniff(path: Path) -> str:
    """The format of ``path`` from its first bytes: one of ``kineto``, ``nsys``, ``nvidia-smi``, ``dmon``,
    ``pmon``, ``prometheus-text``, ``prometheus-json``; raises InputError with what it looks like."""
    from gpusleuth.sources.kineto.reader import open_regular  # a FIFO or a device must not block the sniff

    with open_regular(path) as f:
        head = f.read(_SNIFF)
    if head.startswith(SQLITE_MAGIC):
        return "nsys"
    if head[:2] == b"\x1f\x8b" or head[:3] == b"BZh" or head[:6] == b"\xfd7zXZ\x00" \
            or head[:4] in (b"\x28\xb5\x2f\xfd", b"PK\x03\x04"):
        # gzip, bzip2, xz, zstd, zip: only profiler traces come compressed; the reader says if it is not one
        return "kineto"
    text = head.decode("utf-8", errors="replace").removeprefix("\ufeff")  # a BOM is not content
    stripped = text.lstrip("\ufeff \t\r\n")
    if stripped.startswith(("{", "[")):
        if re.search(r'"resultType"\s*:\s*"(matrix|vector)"', text[:200_000]):
            return "prometheus-json"
        return "kineto"
    from gpusleuth.sources import dmon, nvsmi, prometheus

    if nvsmi.find_header(text):
        return "nvidia-smi"
    if dmon.is_dmon(text):
        return "dmon"
    if dmon.is_pmon(text):
        return "pmon"
    if prometheus.is_text_scrape(text):
        return "prometheus-text"
    if nvsmi.looks_like_noheader(text):
        return "nvidia-smi"
    if head[:8] == b"\x00\x00\x00\x00\x00\x00\x00\x00" or path.suffix in (".nsys-rep", ".qdrep") or \
            (b"\x00" in head[:4096] and not text.isprintable()):
        if path.suffix in (".nsys-rep", ".qdrep") or b"nsys" in head[:1 << 16].lower():
            raise InputError(path, "an Nsight Systems report (.nsys-rep) — its format is private to nsys; export "
                                   f"it first:  nsys export --type sqlite --output {path.with_suffix('.sqlite').name} "
                                   f"{path.name}   then give gpusleuth the .sqlite")
        raise InputError(path, "a binary file gpusleuth does not know (expected a profiler trace .json[.gz], an "
                               "Nsight Systems .sqlite export, an nvidia-smi/dmon log or a Prometheus scrape)")
    raise InputError(path, "not a format gpusleuth reads: expected a PyTorch profiler trace (.json[.gz]), an "
                           "Nsight Systems SQLite export, an nvidia-smi --query-gpu CSV or dmon log, or a "
                           "DCGM/Prometheus scrape or query_range JSON")


def _read_kineto(path: Path, options: ImportOptions) -> list[Run]:
    from gpusleuth.sources.kineto import load_trace

    return [load_trace(path)]


def _read_nsys(path: Path, options: ImportOptions) -> list[Run]:
    from gpusleuth.sources.nsys import read_nsys

    return read_nsys(path, step_range=options.step_range)


def _read_nvsmi(path: Path, options: ImportOptions) -> list[Run]:
    from gpusleuth.sources.nvsmi import read_nvsmi_csv

    return [read_nvsmi_csv(path, options.fields, options.tz)]


def _read_dmon(path: Path, options: ImportOptions) -> list[Run]:
    from gpusleuth.sources.dmon import read_dmon

    return [read_dmon(path, options.start_ns, options.interval_s)]


def _refuse_pmon(path: Path, options: ImportOptions) -> list[Run]:
    raise InputError(path, "an nvidia-smi pmon log (per process): gpusleuth reads the per-device logs — "
                           "record `nvidia-smi dmon -o DT` or `nvidia-smi --query-gpu=timestamp,index,"
                           "utilization.gpu,utilization.memory,memory.used,memory.total,power.draw "
                           "--format=csv -l 1` instead")


def _read_prometheus_text(path: Path, options: ImportOptions) -> list[Run]:
    from gpusleuth.sources.prometheus import read_text_scrapes

    return [read_text_scrapes([path])]


def _read_prometheus_json(path: Path, options: ImportOptions) -> list[Run]:
    from gpusleuth.sources.prometheus import read_query_range

    return [read_query_range(path)]


@dataclass(frozen=True)
class InputFormat:
    """One file format gpusleuth reads: its name (what :func:`sniff` says), whether it holds profiler traces
    (one Run per rank) or GPU telemetry, and its reader. A new format is one record here, its recogniser in
    :func:`sniff`, and its reader module."""

    name: str
    kind: Literal["trace", "telemetry"]
    read: Callable[[Path, ImportOptions], list[Run]]


FORMATS: tuple[InputFormat, ...] = (
    InputFormat("kineto", "trace", _read_kineto),
    InputFormat("nsys", "trace", _read_nsys),
    InputFormat("nvidia-smi", "telemetry", _read_nvsmi),
    InputFormat("dmon", "telemetry", _read_dmon),
    InputFormat("pmon", "telemetry", _refuse_pmon),
    InputFormat("prometheus-text", "telemetry", _read_prometheus_text),
    InputFormat("prometheus-json", "telemetry", _read_prometheus_json),
)
FORMAT_BY_NAME: dict[str, InputFormat] = {f.name: f for f in FORMATS}
TRACE_FORMATS = tuple(f.name for f in FORMATS if f.kind == "trace")


def load_file(path: Path, options: ImportOptions | None = None) -> tuple[str, list[Run]]:
    """(format, Runs) for one file."""
    fmt = sniff(path)
    return fmt, FORMAT_BY_NAME[fmt].read(path, options or ImportOptions())


def load_files(paths: list[Path], options: ImportOptions | None = None) -> tuple[str, list[Run]]:
    """Several files: traces (one Run per rank) may be mixed freely; GPU logs are read one at a time,
    except Prometheus text scrapes, which are one instant each and join into one series."""
    fmts = [sniff(p) for p in paths]
    if len(paths) > 1 and all(f == "prometheus-text" for f in fmts):
        from gpusleuth.sources.prometheus import read_text_scrapes

        return "prometheus-text", [read_text_scrapes(paths)]
    runs: list[Run] = []
    kinds = set()
    for p in paths:
        fmt, got = load_file(p, options)
        kinds.add(FORMAT_BY_NAME[fmt].kind)
        runs.extend(got)
    if len(kinds) > 1 or (kinds == {"telemetry"} and len(runs) > 1):
        raise InputError(paths[1], "give one GPU telemetry log at a time (or only trace files): "
                                   f"formats here: {', '.join(dict.fromkeys(fmts))}")
    return ("trace" if kinds == {"trace"} else fmts[0]), runs


def _gpu_index(run: Run, i: int) -> int:
    """The device a rank's trace ran on, else its place among the traces."""
    index = run.meta.get("gpu_index")
    return index if index is not None else i


def as_job(runs: list[Run]) -> Run:
    """Trace ranks read from one export as one job: a Run whose ``profiles`` are the ranks, so the report
    analyses each rank and runs every rule over them, as it does for a recording's traces."""
    if len(runs) == 1 and runs[0].trace is None:
        return runs[0]
    first = runs[0]
    starts = [r.start_ns for r in runs if r.start_ns is not None]
    ends = [r.end_ns for r in runs if r.end_ns is not None]
    meta: RunMeta = {"source": first.meta.get("source"), "label": first.path.name if first.path else "trace",
            "trace_path": first.meta.get("trace_path"), "device": first.meta.get("device"),
            "world_size": len(runs), "start_ns": min(starts) if starts else None,
            "end_ns": max(ends) if ends else None,
            "recorder": {"gpu": [{"index": _gpu_index(r, i), "name": r.meta.get("device")}
                                 for i, r in enumerate(runs)], "host": {}}}
    job = Run(meta=meta, path=first.path, profiles=list(runs))
    gpu = [r.gpu for r in runs if len(r.gpu)]
    if gpu:
        job.gpu = gpu[0]
    return job
