"""What passed outside the server: the client's latency (``gpusleuth load``'s answered rows of a level,
``run.load``) against the server's own time for the same requests (queue + service, the hook's rows) —
``fill_outside`` writes a level's ``client_p50_ms``, ``server_p50_ms``, ``outside_p50_ms`` and ``outside_share``.

Per request where the two sides join on X-Request-Id (``serving/run/request_ids.py``), else the level's client p50 −
server p50. What grows here with load waits before the server's handler starts a request or after it ends it
(the listen backlog, connection handling, the GIL): ``serving/rules/request_path.outside_the_server``
reads it.
"""

from __future__ import annotations

import numpy as np

from gpusleuth.serving.analysis.load import LoadLevel
from gpusleuth.run.model import Run
from gpusleuth.serving.run.request_ids import join_on_ids
from gpusleuth.serving.analysis.request_model import RequestLevel


def fill_outside(level: RequestLevel, run: Run, rows: dict[str, np.ndarray], m: np.ndarray, lv: LoadLevel) -> None:
    """Fill ``level``'s client-versus-server numbers from ``run.load``'s answered rows of that level."""
    load = run.load
    if not len(load) or not {"level", "start_ns", "end_ns", "error"} <= set(load.columns):
        return
    ok = (np.asarray(load["level"], dtype=np.int64) == int(lv.level)) & (np.asarray(load["error"], dtype=object) == "")
    if not ok.any():
        return
    c_start = np.asarray(load["start_ns"], dtype=np.int64)[ok]
    if "lag_ns" in load:  # open loop: latency counts from the schedule; the send was lag later
        c_start = c_start + np.maximum(np.asarray(load["lag_ns"], dtype=np.int64)[ok], 0)
    client = (np.asarray(load["end_ns"], dtype=np.int64)[ok] - c_start).astype(np.float64)
    server = (rows["end_ns"][m] - rows["start_ns"][m] + np.maximum(rows["queue_ns"][m], 0)).astype(np.float64)
    if not len(server):
        return
    level.client_p50_ms = float(np.percentile(client, 50)) / 1e6
    level.server_p50_ms = float(np.percentile(server, 50)) / 1e6
    if "request_id" in load and "request_id" in rows:
        ci, si = join_on_ids(np.asarray(load["request_id"])[ok], rows["request_id"][m])
        if len(ci) >= max(10, len(client) // 2):
            gap = np.maximum(client[ci] - server[si], 0.0)
            level.outside_p50_ms = float(np.percentile(gap, 50)) / 1e6
            # the typical request's share, not a sum: one request held 3.4 s while Ray's replica started carried
            # a sum to 55.9 % at concurrency 1 where the level's own p50s give 24 %
            ok_c = client[ci] > 0
            level.outside_share = float(np.median(gap[ok_c] / client[ci][ok_c])) if ok_c.any() else 0.0
            level.outside_joined = len(ci)
            return
    gap_ms = max(level.client_p50_ms - level.server_p50_ms, 0.0)
    level.outside_p50_ms = gap_ms
    level.outside_share = gap_ms / level.client_p50_ms if level.client_p50_ms > 0 else 0.0
