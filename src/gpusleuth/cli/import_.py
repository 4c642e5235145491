"""``gpusleuth import FILE… --out RUN_DIR``: store what the user already has as a normal run directory.

GPU logs (nvidia-smi, dmon, DCGM/Prometheus) become ``gpu.parquet`` with the recorder's exact schema;
Nsight Systems exports become one Chrome/Kineto trace per rank under ``trace/``. Then ``report``,
``compare``, fleet queries and DuckDB (``select … from 'RUN_DIR/gpu.parquet'``) work on it like on a
recorded run (docs/run-format.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpusleuth.errors import InputError

if TYPE_CHECKING:
    from gpusleuth.cli.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "import",
        help="store an nvidia-smi/dmon log, DCGM/Prometheus data or an Nsight Systems export as a run directory",
        description=(
            "Read a file gpusleuth recognises by content — an nvidia-smi --query-gpu CSV or dmon log, "
            "dcgm-exporter / nvidia_gpu_exporter scrapes, a Prometheus query_range JSON, or an Nsight Systems "
            "SQLite export — and write it as a gpusleuth run directory (meta.json, gpu.parquet, trace/), so "
            "`gpusleuth report`, `gpusleuth compare` and DuckDB work on it like on a recorded run."
        ),
        epilog="Examples:\n  gpusleuth import gpu_log.csv --out runs/node7-gpu --tz Europe/Berlin\n"
        "  gpusleuth import scrape-*.prom --out runs/dcgm\n"
        "  gpusleuth import profile.sqlite --out runs/nsys --step-range train_step\n"
        "  duckdb -c \"select gpu, avg(util_gpu) from 'runs/node7-gpu/gpu.parquet' group by gpu\"",
        formatter_class=__import__("argparse").RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="+", type=Path, help="the file(s) to import (several only for scrapes or traces)")
    p.add_argument("--out", type=Path, required=True, metavar="RUN_DIR", help="run directory to create")
    p.add_argument("--force", action="store_true", help="write into RUN_DIR even if it already holds a run")
    from gpusleuth.cli.options import add_import_options

    add_import_options(p)
    p.set_defaults(func=import_command)


def import_command(args: argparse.Namespace) -> int:
    from gpusleuth.lean_imports import keep_pandas_out
    from gpusleuth.recorder.store import write_run_dir
    from gpusleuth.cli.options import import_options
    from gpusleuth.sources.inputs import read_inputs

    keep_pandas_out()
    for p in args.paths:
        if not p.exists():
            raise InputError(p, "no such file or directory")
    out: Path = args.out
    from gpusleuth.run.layout import RunDir

    if RunDir(out).meta_file.exists() and not args.force:
        raise InputError(out, "already holds a run (meta.json); choose another --out or pass --force")
    inputs = read_inputs(list(args.paths), import_options=import_options(args), files_only=True)
    kind, job = inputs.kind, inputs.job
    job.meta["imported_from"] = {"paths": [str(p) for p in args.paths], "format": kind}
    written = write_run_dir(job, out)
    for loss in job.losses + [m for r in job.profiles for m in r.losses]:
        print(f"gpusleuth: note: {loss}", file=sys.stderr)
    print(f"gpusleuth: imported {', '.join(p.name for p in args.paths)} ({kind}) into {out}: {', '.join(written)}",
          file=sys.stderr)
    return 0
