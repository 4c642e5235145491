"""``gpusleuth finalize RUN_DIR…``: make final a run whose launcher died, explicitly.

Why a verb: reading a run never writes it (``report``, ``compare``, ``fleet`` and the live view leave it
byte-identical), so a run left unfinished by a killed launcher stays as it was until someone asks for this.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpusleuth.cli.options import Subparsers


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "finalize",
        help="make final a run whose launcher was killed (Parquet tables, its end, its losses in meta.json)",
        description=(
            "A run whose `gpusleuth run` was killed (kill -9, a lost node) keeps its telemetry as Arrow streams "
            "and raw event files, and has no recorded end; `gpusleuth report` reads it as it is and changes "
            "nothing. This converts it into its final form, as the launcher would have: Parquet tables, the end "
            "taken as the last sample, and every loss written into meta.json so later reports state them. A run "
            "still being recorded is refused. Nothing that could not be converted and verified is deleted."
        ),
        epilog="Example: gpusleuth finalize gpusleuth-runs/20260101-120000-train.py",
    )
    p.add_argument("runs", nargs="+", type=Path, help="run directories")
    p.set_defaults(func=finalize_command)


def finalize_command(args: argparse.Namespace) -> int:
    from gpusleuth.recorder.finalize import finalize_unfinished
    from gpusleuth.render.text import inert

    for run_dir in args.runs:
        notes = finalize_unfinished(run_dir)
        print(inert(f"gpusleuth: {run_dir} is final"), file=sys.stderr)
        for note in notes:
            print(inert(f"  {note}"), file=sys.stderr)
    return 0
