"""The tracker options of ``gpusleuth report`` (``--mlflow``, ``--wandb``) and the run's summary cache.

Kept out of cli/report.py so that verb stays about printing; the loggers are in render/trackers/.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpusleuth.report.model import Report
    from gpusleuth.run.model import Run


def add_tracker_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("experiment trackers")
    g.add_argument("--mlflow", default=None, metavar="URI",
                   help="log headline outcomes, badput split, top findings and the HTML report to this MLflow "
                   "tracking URI (file:///path/mlruns, http://server:5000 …); needs gpusleuth[mlflow]")
    g.add_argument("--mlflow-experiment", default="gpusleuth", metavar="NAME",
                   help="MLflow experiment for the new run (default gpusleuth)")
    g.add_argument("--mlflow-run-id", default=None, metavar="ID",
                   help="add to this existing MLflow run (e.g. the training run) instead of making a new one")
    g.add_argument("--wandb", default=None, metavar="PROJECT",
                   help="log the same to this Weights & Biases project; needs gpusleuth[wandb]")
    g.add_argument("--wandb-mode", default="offline", choices=("offline", "online"),
                   help="offline (default) writes the W&B run locally with no network ('wandb sync' uploads it)")
    g.add_argument("--wandb-dir", type=Path, default=None, metavar="DIR",
                   help="where W&B writes its files (default: W&B's own, ./wandb)")


def send_to_trackers(report: Report, run: Run | None, args: argparse.Namespace) -> None:
    if not (getattr(args, "mlflow", None) or getattr(args, "wandb", None)):
        return
    from gpusleuth.report.summary import summarize

    summary = summarize(report, run.meta if run is not None else None)  # None: profiler traces
    if args.mlflow:
        from gpusleuth.render.trackers.to_mlflow import log_to_mlflow

        run_id = log_to_mlflow(report, summary, args.mlflow, args.mlflow_experiment, args.mlflow_run_id)
        print(f"gpusleuth: logged to MLflow at {args.mlflow} (run {run_id})", file=sys.stderr)
    if args.wandb:
        from gpusleuth.render.trackers.to_wandb import log_to_wandb

        where = log_to_wandb(report, summary, args.wandb, args.wandb_mode, args.wandb_dir)
        print(f"gpusleuth: logged to W&B project {args.wandb} ({args.wandb_mode}: {where})", file=sys.stderr)


def cache_summary(report: Report, run: Run | None) -> None:
    """Leave ``summary.json`` in a recorded run's directory for ``gpusleuth fleet`` (best effort)."""
    path = run.path if run is not None else None
    from gpusleuth.run.layout import RunDir

    if run is None or not path or not RunDir(path).is_run():  # a run directory, never a folder of traces
        return
    from gpusleuth.recorder.summary import write_summary
    from gpusleuth.report.summary import summarize

    try:
        write_summary(Path(path), summarize(report, run.meta).to_dict())
    except Exception as exc:  # noqa: BLE001 - a cache must never cost the user the report
        print(f"gpusleuth: could not write {Path(path) / 'summary.json'} ({exc.__class__.__name__}: {exc})",
              file=sys.stderr)
