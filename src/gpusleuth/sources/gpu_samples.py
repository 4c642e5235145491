"""Shared tail of every GPU-telemetry importer (nvidia-smi CSV, dmon, DCGM/Prometheus): columns → Run.

Each reader turns its file into numpy columns named like the recorder's ``gpu`` table
(``recorder/schemas.GPU_SCHEMA``); this module sorts them, names the devices, states sampler gaps as
losses (gaps stay gaps: no interpolation) and wraps them in a :class:`Run`, so the telemetry analysis
and the GPU rules apply to imported logs unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gpusleuth.recorder.schemas import GPU_SCHEMA
from gpusleuth.run.gaps import fmt_seconds, sampler_gaps
from gpusleuth.run.meta import RunMeta
from gpusleuth.run.model import Run, Table
from gpusleuth.run.records import Scalar, gpu_hardware

if TYPE_CHECKING:
    import pyarrow as pa

def gap_losses(table: Table, what: str) -> list[str]:
    """One sentence per device with sampler gaps: how many, how long, the share of the capture lost."""
    out = []
    for gpu in np.unique(table["gpu"]):
        t = table["t_ns"][table["gpu"] == gpu]
        med, gaps = sampler_gaps(t)
        if not gaps:
            continue
        lost = sum(s for _, s in gaps)
        span = (t[-1] - t[0]) / 1e9
        longest = max(gaps, key=lambda g: g[1])
        out.append(
            f"{what}: GPU {int(gpu)} has {len(gaps)} sampler gap(s) in its {med:g} s sampling, "
            f"{fmt_seconds(lost)} without samples ({lost / span:.1%} of the capture; longest {fmt_seconds(longest[1])}); "
            "gaps are kept as gaps, not interpolated")
    return out


def build_gpu_run(path: Path, columns: dict[str, np.ndarray], *, source: str, devices: dict[int, dict[str, Scalar]],
                  losses: list[str], meta: RunMeta | None = None) -> Run:
    """A Run whose ``gpu`` table holds ``columns`` (``t_ns`` and ``gpu`` required; any schema column)."""
    known = set(GPU_SCHEMA.names)
    unknown = set(columns) - known
    if unknown:
        raise KeyError(f"not gpu-table columns: {sorted(unknown)}")
    table = Table(columns)
    order = np.lexsort((table["gpu"], table["t_ns"]))
    table = Table({k: v[order] for k, v in table.columns.items()})
    losses = list(losses) + gap_losses(table, path.name)
    start = int(table["t_ns"][0]) if len(table) else None
    end = int(table["t_ns"][-1]) if len(table) else None
    gpus = [gpu_hardware({"index": int(i), **devices.get(int(i), {})}) for i in np.unique(table["gpu"])] if len(table) else []
    run_meta: RunMeta = {
        "source": source,
        "label": path.name,
        "trace_path": str(path),
        "start_ns": start,
        "end_ns": end,
        "recorder": {"gpu": gpus, "host": {}},
        "imported_from": {"path": str(path), "format": source},
    }
    if gpus and gpus[0].get("name"):
        run_meta["device"] = gpus[0]["name"]
    run_meta.update(meta or {})
    return Run(meta=run_meta, path=path, gpu=table, losses=losses)


def gpu_arrow_table(table: Table) -> pa.Table:
    """The ``gpu`` table as Arrow with the recorder's exact schema (missing columns null), for Parquet."""
    import pyarrow as pa

    arrays = []
    n = len(table)
    for f in GPU_SCHEMA:
        if f.name not in table:
            arrays.append(pa.nulls(n, type=f.type))
            continue
        v = np.asarray(table[f.name])
        if pa.types.is_integer(f.type):
            fv = v.astype(np.float64)
            mask = ~np.isfinite(fv)
            arrays.append(pa.array(np.where(mask, 0, fv).astype(np.int64), mask=mask).cast(f.type))
        else:
            arrays.append(pa.array(v.astype(np.float64), type=f.type))
    return pa.Table.from_arrays(arrays, schema=GPU_SCHEMA)
