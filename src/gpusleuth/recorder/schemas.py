"""Arrow schemas of the four sampled tables (``gpu``, ``gpu_procs``, ``host``, ``procs``).

These are the contract between the samplers (which produce one dict per row, keyed by these names) and
the recorder loop (which appends them to Arrow IPC streams and later Parquet). They are documented
column by column in ``docs/run-format.md``; a change here is a change to the run format.

Type choices, and why:

- Cumulative hardware counters (energy aside) are ``int64`` with nulls, not floats: a throttle-time
  counter in ns passes 2**53 after ~104 days of uptime, and differencing two floats of that size
  silently loses the small deltas the analysis cares about. Counter wrap is left to the analysis; we
  record the raw value.
- Gauges (percentages, watts, MHz) are ``float64`` with NaN for "not available", so the analysis can use
  numpy's nan-aware reductions without masks.
- ``energy_j`` is float64 J: the driver's counter is mJ since driver load; a float64 is exact to the mJ
  for ~285 years of a 1 kW card.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

_T = ("t_ns", pa.int64())

GPU_SCHEMA = pa.schema(
    [
        _T,
        ("gpu", pa.int32()),
        ("util_gpu", pa.float64()),
        ("util_mem", pa.float64()),
        ("mem_used", pa.int64()),
        ("mem_total", pa.int64()),
        ("power_w", pa.float64()),
        ("power_instant_w", pa.float64()),
        ("energy_j", pa.float64()),
        ("temp_c", pa.float64()),
        ("sm_clock_mhz", pa.float64()),
        ("mem_clock_mhz", pa.float64()),
        ("clock_event_reasons", pa.int64()),
        ("throttle_power_ns", pa.int64()),
        ("throttle_thermal_ns", pa.int64()),
        ("throttle_thermal_policy_ns", pa.int64()),
        ("throttle_sync_boost_ns", pa.int64()),
        ("throttle_hw_thermal_ns", pa.int64()),
        ("throttle_hw_power_brake_ns", pa.int64()),
        ("pcie_tx_bytes", pa.int64()),
        ("pcie_rx_bytes", pa.int64()),
        ("sm_active", pa.float64()),
        ("sm_occupancy", pa.float64()),
        ("tensor_active", pa.float64()),
        ("dram_active", pa.float64()),
        ("fv_latency_us", pa.float64()),
        ("sample_us", pa.float64()),
    ]
)

GPU_PROCS_SCHEMA = pa.schema(
    [
        _T,
        ("gpu", pa.int32()),
        ("pid", pa.int64()),
        ("used_mem", pa.int64()),
    ]
)

HOST_SCHEMA = pa.schema(
    [
        _T,
        ("cpu_pct", pa.float64()),
        ("cpu_per_core", pa.list_(pa.float32())),
        ("iowait_pct", pa.float64()),
        ("mem_used", pa.int64()),
        ("mem_total", pa.int64()),
        ("disk_read_bytes", pa.int64()),
        ("disk_write_bytes", pa.int64()),
        ("net_rx_bytes", pa.int64()),
        ("net_tx_bytes", pa.int64()),
        ("cg_nr_periods", pa.int64()),
        ("cg_nr_throttled", pa.int64()),
        ("cg_throttled_usec", pa.int64()),
        ("cg_mem_used", pa.int64()),
        ("cg_mem_limit", pa.int64()),
        ("psi_cpu_some_us", pa.int64()),
        ("psi_io_some_us", pa.int64()),
        ("psi_io_full_us", pa.int64()),
        ("psi_mem_some_us", pa.int64()),
    ]
)

PROCS_SCHEMA = pa.schema(
    [
        _T,
        ("pid", pa.int64()),
        ("ppid", pa.int64()),
        ("name", pa.string()),
        ("cpu_pct", pa.float64()),
        ("rss_bytes", pa.int64()),
        ("num_threads", pa.int32()),
        ("status", pa.string()),
        ("read_bytes", pa.int64()),  # /proc/PID/io: bytes its reads brought from storage (page-cache hits not)
        ("write_bytes", pa.int64()),
        ("start_ns", pa.int64()),
        ("nspid", pa.int64()),  # PID in the process's own (container) namespace, when it differs
        # its main thread's /proc/PID/schedstat, cumulative ns: time on a CPU, time runnable waiting for one
        ("thread_cpu_ns", pa.int64()),
        ("run_delay_ns", pa.int64()),
        # /proc/PID/io rchar: bytes its read calls returned from anything (files, the page cache, sockets, pipes)
        ("read_chars", pa.int64()),
    ]
)

SCHEMAS = {"gpu": GPU_SCHEMA, "gpu_procs": GPU_PROCS_SCHEMA, "host": HOST_SCHEMA, "procs": PROCS_SCHEMA}

#: Columns added after runs of format 1 were first recorded: a run without them is an older recording, not a
#: damaged one — the analysis reads them where present, and their absence is no loss to report.
ADDED_LATER: dict[str, frozenset[str]] = {
    "gpu": frozenset({"throttle_thermal_policy_ns"}),  # 2026-11-25
    "procs": frozenset({"nspid",  # 2026-11-25
                        "thread_cpu_ns", "run_delay_ns",  # 2026-11-26
                        "read_chars"}),  # 2026-11-28
}


def empty_row(schema: pa.Schema) -> dict[str, Any]:
    """A row with every column missing: NaN for floats, None for the rest.

    Samplers start from this so a row always has every column, whatever the hardware could answer.
    """
    return {f.name: (float("nan") if pa.types.is_floating(f.type) else None) for f in schema}


def to_batch(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    """Rows (dicts keyed by column name) → one RecordBatch of ``schema``; unknown keys are an error.

    Used by the recorder and the tests alike, so that "the rows fit the schema" is checked the same way.
    """
    names = set(schema.names)
    for r in rows:
        extra = set(r) - names
        if extra:
            raise KeyError(f"columns not in schema: {sorted(extra)}")
    cols = [pa.array([r.get(f.name) for r in rows], type=f.type) for f in schema]
    return pa.RecordBatch.from_arrays(cols, schema=schema)
