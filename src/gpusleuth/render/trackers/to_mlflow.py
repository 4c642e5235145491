"""``report RUN --mlflow URI``: the run's outcomes, findings and HTML report into an MLflow tracking store.

Uses ``mlflow-skinny`` (extra ``gpusleuth[mlflow]``) through ``MlflowClient``, so nothing global (the
active run, the tracking URI of the user's own code) is touched. A new MLflow run is made in the
experiment ``--mlflow-experiment`` (default ``gpusleuth``), named after the gpusleuth run, unless
``--mlflow-run-id`` names an existing run (the training run itself) to add to.

Keys: MLflow names may hold only letters, digits, ``_ - . : /`` and spaces, while phase names are the
user's own ("eval (val set)", "save ckpt #3"), so every name we build a key from goes through
:func:`mlflow_key`, a mapping that cannot make two names one: ``:`` becomes ``::``, and any other character
outside letters, digits, ``_ - .`` and space (``/`` included, so a name is never read as a path) becomes
``:<hex code point>:`` — "eval (val set)" → "eval :28:val set:29:". It can be decoded back, hence no
collisions; only a key longer than MLflow's 250 characters is cut and given a hash of the whole name.

Failure: a run this call created is never left RUNNING and empty — it is ended FAILED, with the reason in
the tag ``gpusleuth.error``. A run named with ``--mlflow-run-id`` is the user's, and is left as it was.
"""

from __future__ import annotations

import hashlib
import os
import re
import time

from typing import TYPE_CHECKING, Any

from gpusleuth.render.trackers import metrics, params, report_files, tags

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from gpusleuth.report.model import Report
    from gpusleuth.report.summary import RunSummary


_PLAIN = re.compile(r"[A-Za-z0-9_\-. ]")
KEY_MAX = 250  # MLflow's longest metric / param / tag key


def mlflow_key(name: str) -> str:
    """``name`` in MLflow's allowed characters, injectively (see the module docstring)."""
    out = "".join(c if _PLAIN.fullmatch(c) else "::" if c == ":" else f":{ord(c):x}:" for c in name)
    if len(out) > KEY_MAX:
        out = out[:KEY_MAX - 9] + "-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return out


def _keyed(values: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``prefix/`` (ours, allowed as it is) + the name mapped by :func:`mlflow_key`."""
    return {prefix + mlflow_key(k[len(prefix):]): v for k, v in values.items()}


def log_to_mlflow(report: Report, summary: RunSummary, uri: str, experiment: str = "gpusleuth", run_id: str | None = None) -> str:
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
    created = None
    try:
        client = MlflowClient(tracking_uri=uri)
        if run_id is None:
            exp = client.get_experiment_by_name(experiment)
            exp_id = exp.experiment_id if exp is not None else client.create_experiment(experiment)
            run_id = created = client.create_run(exp_id, run_name=summary.label or None).info.run_id
        now = int(time.time() * 1000)
        client.log_batch(
            run_id,
            metrics=[Metric(k, v, now, 0) for k, v in _keyed(metrics(summary), "gpusleuth/").items()],
            params=[Param(mlflow_key(k), v) for k, v in params(summary).items()],
            tags=[RunTag(mlflow_key(k), v) for k, v in tags(report).items()],
        )
        with report_files(report) as files:
            for f in files:
                client.log_artifact(run_id, str(f), artifact_path="gpusleuth")
        client.set_terminated(run_id)
    except (MlflowException, OSError) as exc:
        from gpusleuth.errors import InputError

        message = str(getattr(exc, "message", None) or exc).splitlines()[0][:300]
        if created is not None:
            message += _end_failed(client, created, message)
        raise InputError(uri, f"MLflow could not take the run: {message}") from None
    return run_id


def _end_failed(client: MlflowClient, run_id: str, reason: str) -> str:
    """End the run we created as FAILED, the reason in a tag; returns what to add to the error sentence."""
    from mlflow.exceptions import MlflowException

    try:
        client.set_tag(run_id, "gpusleuth.error", reason[:5000])
    except (MlflowException, OSError):
        pass
    try:
        client.set_terminated(run_id, status="FAILED")
    except (MlflowException, OSError) as exc:
        return f" (and its run {run_id} could not be marked FAILED: {str(exc).splitlines()[0][:120]})"
    return f" (its run {run_id} is marked FAILED)"
