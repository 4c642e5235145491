"""A forward that names a request served it only if it started before the request's answer.

Ray Serve under overload (48 of 235 requests timed out by the client, the host's CPU 99.9 % busy): the batcher took
requests whose clients had gone — it named one in a forward of 2 rows with 3 keys and dropped it, and ran another
alone 38 ms after its request had ended with a 500. Joined by name alone, both read as served, one with no model
time at all (its forward clipped to its ended service), and the level counted 3 requests more than the replica's
own clock (tests/test_serving_followed.py, the Poisson level). The rows below are that run's, relative to its
level start, in ms.
"""
from __future__ import annotations

import numpy as np

from gpusleuth.run.model import Table
from gpusleuth.serving.analysis.batching import join_batches
from gpusleuth.serving.analysis.follow import follow_note

MS = 1_000_000


def _requests() -> Table:
    # served (batch 0), cancelled before its batch ran (named in batch 1, dropped), served (batch 1, of 2 rows),
    # served (batch 1), cancelled with its forward after its end (batch 2)
    start = np.asarray([12100, 12905, 12950, 12960, 12381]) * MS
    end = np.asarray([12300, 12958, 13100, 13100, 12619]) * MS
    status = np.asarray([200, 500, 200, 200, 500])
    n = len(start)
    return Table({"pid": np.full(n, 7), "start_ns": start, "end_ns": end, "forwards": np.zeros(n, np.int64),
                  "status": status, "follow_key": np.asarray(["a", "x", "b", "c", "y"], dtype=object),
                  "handoff_ns": start + MS, "claimed_ns": np.full(n, -1), "delivered_ns": np.full(n, -1),
                  "received_ns": np.full(n, -1), "gets": np.zeros(n, np.int64)})


def _batches() -> Table:
    return Table({"pid": np.full(3, 7), "start_ns": np.asarray([12200, 13048, 12657]) * MS,
                  "end_ns": np.asarray([12201, 13050, 12658]) * MS, "rows": np.asarray([1, 2, 1]),
                  "keys": np.asarray(["a/-1", "x/-1,b/-1,c/-1", "y/-1"], dtype=object)})


def test_a_named_request_that_had_ended_is_not_served():
    req, b = _requests(), _batches()
    j = join_batches(req, b)
    assert j is not None
    assert sorted(j.index.tolist()) == [0, 2, 3]
    assert j.members.tolist() == [1, 2, 0]  # the forward of 2 rows served 2; the late one served nobody
    assert (j.parts["infer_ns"] > 0).all()
    said = follow_note(req, j.index, b)
    assert said is not None and "2×500" in said
