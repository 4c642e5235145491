"""A batching server's knobs by the framework that serves the model, so a fix names the knob the user can turn.

The hook says which serving framework it patched (``serving_framework``: LitServe, Ray Serve, BentoML; read by
``serving/analysis/requests.py`` into ``RequestAnalysis.framework``). A LitServe user told to shorten Triton's
``max_queue_delay_microseconds`` has nothing to turn; told ``batch_timeout``, they do. Where the framework is
unknown (a hand-written queue, another server) the fixes keep naming the common servers' knobs as examples.

The names are the frameworks' own, checked against the versions the tests run (LitServe 0.2.19:
``LitServer``/``LitAPI(max_batch_size, batch_timeout)``, ``LitServer(workers_per_device, devices)``; Ray Serve
2.60: ``@serve.batch(max_batch_size, batch_wait_timeout_s, max_concurrent_batches)``,
``@serve.deployment(num_replicas)``; BentoML 1.4: ``@bentoml.api(batchable, max_batch_size, max_latency_ms)``,
``@bentoml.service(workers)``; the one BentoML release the tests pin, tests/test_serving_bentoml.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchKnobs:
    """One framework's batching and scaling knobs, each as the words a fix says."""

    framework: str  # as its users name it
    wait_window: str  # how long the batcher waits for more requests
    max_batch: str  # the largest batch it forms
    replicas: str  # more copies of the model
    turn_on: str  # batching where each request ran its own forward
    overlap: str | None = None  # collect the next batch while the model runs this one


KNOBS = {
    "litserve": BatchKnobs(
        framework="LitServe",
        wait_window="`batch_timeout` (in seconds, on `LitServer` or your `LitAPI`)",
        max_batch="`max_batch_size`",
        replicas="`workers_per_device` (and `devices`) of `LitServer`",
        turn_on="`LitServer(api, max_batch_size=N, batch_timeout=0.005)`, with `batch`/`unbatch` on your LitAPI "
                "where inputs need stacking"),
    "ray_serve": BatchKnobs(
        framework="Ray Serve",
        wait_window="`batch_wait_timeout_s` of `@serve.batch`",
        max_batch="`max_batch_size` of `@serve.batch`",
        replicas="`num_replicas` of `@serve.deployment` (or its `autoscaling_config`)",
        turn_on="`@serve.batch(max_batch_size=N, batch_wait_timeout_s=0.005)` on an async method that takes a list",
        overlap="`max_concurrent_batches` of `@serve.batch`"),
    "bentoml": BatchKnobs(
        framework="BentoML",
        wait_window="`max_latency_ms` of `@bentoml.api` (its adaptive batcher waits within that budget)",
        max_batch="`max_batch_size` of `@bentoml.api`",
        replicas="`workers` of `@bentoml.service`",
        turn_on="`@bentoml.api(batchable=True, max_batch_size=N, max_latency_ms=...)`"),
}


def knobs_for(framework: str | None) -> BatchKnobs | None:
    """The framework's knobs, None where it is not one whose knobs are known here."""
    return KNOBS.get(framework) if framework is not None else None
