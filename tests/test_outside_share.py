"""The time outside the server is the typical request's share of its latency, not a sum that one slow request
carries (issue 32 item 6: one request held 3.4 s while Ray's replica started read 55.9 % at concurrency 1 where
the level's p50s gave 24 %)."""

from __future__ import annotations

import numpy as np
import pytest

from gpusleuth.serving.analysis.load import LoadLevel
from gpusleuth.serving.analysis.outside_server import fill_outside
from gpusleuth.serving.analysis.request_model import RequestLevel
from gpusleuth.run.model import Run, Table


def test_one_request_held_at_start_up_does_not_carry_the_share():
    n = 40
    t0 = np.arange(n, dtype=np.int64) * 20_000_000 + 10**12
    client_ms = np.full(n, 10.0)
    client_ms[0] = 3400.0  # the first request waited while the replica started
    ids = np.array([f"r{i}" for i in range(n)], dtype=object)
    load = Table({"level": np.zeros(n, np.int64), "start_ns": t0, "end_ns": t0 + (client_ms * 1e6).astype(np.int64),
                  "error": np.full(n, "", dtype=object), "request_id": ids})
    server_ns = np.full(n, 7_600_000, np.int64)  # 7.6 ms of service: 24 % of each 10 ms outside the server
    rows = {"start_ns": t0 + 1_000_000, "end_ns": t0 + 1_000_000 + server_ns, "queue_ns": np.zeros(n, np.int64),
            "request_id": ids}
    level = RequestLevel(level=0, concurrency=1, rate=0.0, requests=n, shares={}, p95_ms=None, queue_p95_share=None,
                         rps=0.0, server_cores=None, gpu_busy=None)
    lv = LoadLevel(level=0, concurrency=1, rate=0.0, start_ns=int(t0[0]), end_ns=int(t0[-1]) + 10**9, requests=n,
                   ok=n, errors=0, timeouts=0, rps=50.0, p50_ms=10.0, p95_ms=10.0, p99_ms=10.0, max_ms=3400.0)
    fill_outside(level, Run(meta={}, load=load), rows, np.ones(n, bool), lv)
    assert level.outside_joined == n
    assert level.outside_share == pytest.approx(0.24, abs=0.01)  # a sum gave 0.95
    assert level.outside_p50_ms == pytest.approx(2.4, abs=0.05)
