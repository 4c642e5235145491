"""``report RUN --mlflow URI``: the run's outcomes, findings and HTML report into an MLflow tracking store.

Uses ``mlflow-skinny`` (extra ``gpusleuth[mlflow]``) through ``MlflowClient``, so nothing global (the
active run, the tracking URI of the user's own code) is touched. A new MLflow run is made in the
experiment ``--mlflow-experiment`` (default ``gpusleuth``), named after the gpusleuth run, unless
``--mlflow-run-id`` names an existing run (the training run itself) to add to.
"""

from __future__ import annotations

import os
import time

from gpusleuth.render.trackers import metrics, params, report_files, tags


def log_to_mlflow(report, summary, uri: str, experiment: str = "gpusleuth", run_id: str | None = None) -> str:
    """Log and return the MLflow run id."""
    try:
        from mlflow.entities import Metric, Param, RunTag
        from mlflow.tracking import MlflowClient
    except ImportError:
        from gpusleuth.errors import InputError

        raise InputError(uri, "--mlflow needs MLflow: pip install 'gpusleuth[mlflow]'") from None
    from mlflow.exceptions import MlflowException

    if uri.startswith("file:") or "://" not in uri:
        # MLflow 3 refuses a file store unless asked; naming a file URI on our command line is asking.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    try:
        client = MlflowClient(tracking_uri=uri)
        if run_id is None:
            exp = client.get_experiment_by_name(experiment)
            exp_id = exp.experiment_id if exp is not None else client.create_experiment(experiment)
            run_id = client.create_run(exp_id, run_name=summary.label or None).info.run_id
        now = int(time.time() * 1000)
        client.log_batch(
            run_id,
            metrics=[Metric(k, v, now, 0) for k, v in metrics(summary).items()],
            params=[Param(k, v) for k, v in params(summary).items()],
            tags=[RunTag(k, v) for k, v in tags(report).items()],
        )
        with report_files(report) as files:
            for f in files:
                client.log_artifact(run_id, str(f), artifact_path="gpusleuth")
        client.set_terminated(run_id)
    except (MlflowException, OSError) as exc:
        from gpusleuth.errors import InputError

        message = str(getattr(exc, "message", None) or exc).splitlines()[0][:300]
        raise InputError(uri, f"MLflow could not take the run: {message}") from None
    return run_id
