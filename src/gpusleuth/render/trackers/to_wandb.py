"""``report RUN --wandb PROJECT``: the run's outcomes, findings and HTML report into Weights & Biases.

Offline by default (``--wandb-mode offline``): the run is written under ``--wandb-dir`` and needs no
network or account; ``wandb sync`` uploads it later. Extra ``gpusleuth[wandb]``. Headline numbers go to
the run summary (W&B's place for one value per run), the findings to config and tags, the reports to an
artifact of type ``gpusleuth-report``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from gpusleuth.render.trackers import metrics, params, report_files, tags

if TYPE_CHECKING:
    from gpusleuth.report.model import Report
    from gpusleuth.report.summary import RunSummary


def log_to_wandb(report: Report, summary: RunSummary, project: str, mode: Literal["offline", "online"] = "offline",
                 directory: Path | None = None) -> str:
    """Log and return the W&B run's local directory (offline) or URL (online)."""
    from gpusleuth.lean_imports import let_pandas_in

    let_pandas_in()
    try:
        import wandb
    except ImportError:
        from gpusleuth.errors import InputError

        raise InputError(project, "--wandb needs wandb: pip install 'gpusleuth[wandb]'") from None
    found = tags(report)
    if directory is not None:
        Path(directory).mkdir(parents=True, exist_ok=True)  # wandb warns, and writes elsewhere, without it
    run = wandb.init(
        project=project, name=summary.label or None, mode=mode, dir=str(directory) if directory else None,
        config={**params(summary), **found}, tags=[found["gpusleuth.top_cause"]] if "gpusleuth.top_cause" in found
        else None, job_type="gpusleuth-report", reinit="create_new", settings=wandb.Settings(silent=True),
    )
    where = str(run.url) if mode == "online" else str(Path(run.dir).parent)
    # finish() inside the with: the artifact's files must still exist when W&B stages them
    with report_files(report) as files:
        try:
            values = metrics(summary)
            run.log(values)
            run.summary.update(values)
            artifact = wandb.Artifact(f"gpusleuth-report-{run.id}", type="gpusleuth-report")
            for f in files:
                artifact.add_file(str(f))
            run.log_artifact(artifact)
        finally:
            run.finish()
    return where
