"""``--export-requests F.jsonl``: every request of a ``gpusleuth load`` as one JSON line.

Why a flat text export beside ``load.parquet``: a person checking one slow request, or joining the client's
view with a server's own log, wants each request readable on its own — its times in milliseconds, every
inter-token gap, its tokens — in a file ``jq``, pandas or a spreadsheet opens. Fields (docs/serving.md):
``request_id`` (the ``X-Request-Id`` sent), ``level``, ``concurrency``, ``rate``, ``start_ns``, ``end_ns``,
``status``, ``error``, ``detail``, ``lag_ms``, ``ttft_ms`` (null without a token), ``e2e_ms``, ``itl_ms``
(every gap between token events), ``input_tokens``/``output_tokens`` (null when unknown), ``tokens_from``,
``prompt`` (index of the prompt sent; null for plain HTTP), ``engine_prefill_ms``/``engine_decode_ms`` (the
engine's own clock where its answer gave one, llama.cpp's ``timings``; else null), ``cached_tokens`` (prompt
tokens the engine took from its cache, where it said; else null).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gpusleuth.run.model import Table


def _int(col: np.ndarray | None, i: int) -> int | None:
    if col is None:
        return None
    v = col[i]
    return None if v is None or (isinstance(v, float) and v != v) or int(v) < 0 else int(v)


def _ms(col: np.ndarray | None, i: int) -> float | None:
    ns = _int(col, i)
    return ns / 1e6 if ns is not None else None


def write_requests_jsonl(load: Table, path: Path) -> int:
    """Write the rows; returns how many. Atomic: a partial file is never left under ``path``."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    n = len(load)
    get = load.get
    with open(tmp, "w", encoding="utf-8") as f:
        for i in range(n):
            start, end = int(load["start_ns"][i]), int(load["end_ns"][i])
            first = _int(get("first_token_ns"), i)
            tokens = get("token_ns")
            times = np.asarray(tokens[i], dtype=np.int64) if tokens is not None else np.zeros(0, np.int64)
            row = {"request_id": _int(get("request_id"), i), "level": int(load["level"][i]),
                   "concurrency": int(load["concurrency"][i]), "rate": float(load["rate"][i]),
                   "start_ns": start, "end_ns": end, "status": int(load["status"][i]), "error": str(load["error"][i]),
                   "detail": str(get("detail")[i]) if get("detail") is not None else "",
                   "lag_ms": float(load["lag_ns"][i]) / 1e6 if "lag_ns" in load else 0.0,
                   "ttft_ms": (first - start) / 1e6 if first is not None else None, "e2e_ms": (end - start) / 1e6,
                   "itl_ms": [round(g / 1e6, 4) for g in np.diff(times).tolist()],
                   "input_tokens": _int(get("input_tokens"), i), "output_tokens": _int(get("output_tokens"), i),
                   "tokens_from": str(get("tokens_from")[i]) if get("tokens_from") is not None else "",
                   "prompt": _int(get("prompt"), i), "engine_prefill_ms": _ms(get("engine_prefill_ns"), i),
                   "engine_decode_ms": _ms(get("engine_decode_ns"), i), "cached_tokens": _int(get("cached_tokens"), i)}
            f.write(json.dumps(row) + "\n")
    tmp.replace(path)
    return n
