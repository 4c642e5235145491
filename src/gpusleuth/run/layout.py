"""Names of the files in a run directory (see docs/run-format.md)."""

TELEMETRY_TABLES = ("gpu", "gpu_procs", "host", "procs")
EVENT_TABLES = ("steps", "phases")
LOGS_FILE = "logs.jsonl"
TRACE_DIR = "trace"
LOAD_TABLE = "load"  # `gpusleuth load`: one row per request sent (load.parquet)
OUTPUT_LOG = "output.log"  # the job's captured output (MLLOG lines are looked for here by default)
RESERVE_FILE = ".space-reserve"  # held by the launcher while recording, freed for the run's last writes
RECORDING_LOCK = ".recording"  # locked (flock) by the launcher and the recorder while the run is recorded
