"""The run directory: every file name in it, in one place (docs/run-format.md), and :class:`RunDir`, the one
type that turns a directory into those paths. The recorder, the launcher, ``load``, finalize, the readers,
``fleet``, ``sweep`` and the live view all go through it, so a renamed file is renamed once.

Reading a run directory never writes it (a RunDir only names paths; ``read_meta`` opens meta.json read-only).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from gpusleuth.run.meta import META_FILE, RunMeta, read_meta, write_meta

TELEMETRY_TABLES = ("gpu", "gpu_procs", "host", "procs")
EVENT_TABLES = ("steps", "phases")
RAW_DIR = "raw"  # the hook's event lines, one file per process (events-*.tsv)
EVENT_GLOB = "events-*.tsv"
STALLS_DIR = "stalls"  # the recorder's stall watch: stalls.jsonl, and <id>/stacks-<pid>.txt per stall
STALLS_FILE = "stalls.jsonl"
STALL_STOP = "stop"  # stalls/stop: --on-stall kill asks the launcher to end the job
STREAM_SUFFIX = ".arrows"  # telemetry tables while recording (Arrow IPC streams); Parquet once finalized
TABLE_SUFFIX = ".parquet"
LOGS_FILE = "logs.jsonl"
TRACE_DIR = "trace"
LOAD_TABLE = "load"  # `gpusleuth load`: one row per request sent (load.parquet)
REQUESTS_TABLE = "requests"  # a recorded server's requests, once finalized
BATCHES_TABLE = "batches"  # a recorded server's batches, once finalized
ENGINE_METRICS_FILE = "engine_metrics.jsonl"  # an LLM engine's /metrics read while `gpusleuth load` ran
OUTPUT_LOG = "output.log"  # the job's captured output (MLLOG lines are looked for here by default)
RECORDER_LOG = "recorder.log"  # the recorder process's own output
RECORDER_STATUS = "recorder.json"  # the recorder's status at its end (hardware, sampler errors)
SUMMARY_FILE = "summary.json"  # the flat summary `gpusleuth fleet` reads (report/summary.py makes it)
RESERVE_FILE = ".space-reserve"  # held by the launcher while recording, freed for the run's last writes
RECORDING_LOCK = ".recording"  # locked (flock) by the launcher and the recorder while the run is recorded


@dataclass(frozen=True)
class RunDir:
    """A run directory's paths. Only names: nothing is created or read until asked."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def meta_file(self) -> Path:
        return self.path / META_FILE

    @property
    def raw(self) -> Path:
        return self.path / RAW_DIR

    @property
    def output_log(self) -> Path:
        return self.path / OUTPUT_LOG

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY_FILE

    @property
    def logs(self) -> Path:
        return self.path / LOGS_FILE

    @property
    def trace_dir(self) -> Path:
        return self.path / TRACE_DIR

    @property
    def recorder_log(self) -> Path:
        return self.path / RECORDER_LOG

    @property
    def recorder_status(self) -> Path:
        return self.path / RECORDER_STATUS

    @property
    def reserve(self) -> Path:
        return self.path / RESERVE_FILE

    @property
    def recording_lock(self) -> Path:
        return self.path / RECORDING_LOCK

    @property
    def stalls_dir(self) -> Path:
        return self.path / STALLS_DIR

    @property
    def stalls_log(self) -> Path:
        return self.path / STALLS_DIR / STALLS_FILE

    @property
    def stall_stop(self) -> Path:
        return self.path / STALLS_DIR / STALL_STOP

    def table(self, name: str) -> Path:
        """A finalized table (``steps``, ``gpu``, ``load``…): ``<name>.parquet``."""
        return self.path / f"{name}{TABLE_SUFFIX}"

    def stream(self, name: str) -> Path:
        """A telemetry table still being recorded: ``<name>.arrows``."""
        return self.path / f"{name}{STREAM_SUFFIX}"

    def event_files(self) -> list[Path]:
        """The hook's event files, in name order (none when ``raw/`` is absent)."""
        return sorted(self.raw.glob(EVENT_GLOB)) if self.raw.is_dir() else []

    def streams(self) -> list[Path]:
        return sorted(self.path.glob(f"*{STREAM_SUFFIX}"))

    def is_run(self) -> bool:
        """A run directory is a directory holding meta.json."""
        return self.meta_file.is_file()

    def read_meta(self, notes: list[str] | None = None) -> RunMeta:
        """meta.json, its known fields checked (``run/meta.py``: the schema); dropped fields in ``notes``."""
        return read_meta(self.path, notes)

    def write_meta(self, meta: Mapping[str, Any]) -> None:
        """meta.json, atomically (only the recorder, the launcher and the importers write a run)."""
        write_meta(self.path, meta)
