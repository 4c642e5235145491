"""The warm-up requests ``gpusleuth load`` sends before its first level (``--warmup``): what they got, and the
one sentence that says it apart from every level's numbers — a cold engine's start (compiling, a batch manager's
first batch, lazy loading) is not the first level's latency.

Apart from the generator (``serving/recorder/loadgen.py``), which sends them: this is arithmetic on their rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # typing's from Python 3.11; the package runs on 3.10 (annotations are never evaluated)
    from typing import NotRequired

import numpy as np


class WarmupSummary(TypedDict):
    """The warm-up requests (``meta.json``'s ``load.warmup``): latencies and first tokens in ms, by request."""

    requests: int
    ok: int
    failed: dict[str, int]  # by cause: an HTTP status, or what failed
    latency_ms: list[float]
    ttft_ms: list[float]
    start_ns: NotRequired[int]
    end_ns: NotRequired[int]


def warmup_summary(c: dict[str, np.ndarray]) -> WarmupSummary:
    """The warm-up requests: how many, answered, failed by cause, their latencies and first tokens (ms)."""
    ok = c["error"] == ""
    lat = (c["end_ns"] - c["start_ns"]) / 1e6
    ttft = np.where(c["first_token_ns"] >= 0, (c["first_token_ns"] - c["start_ns"]) / 1e6, np.nan)
    failed: dict[str, int] = {}
    for e, st in zip(c["error"][~ok].tolist(), c["status"][~ok].tolist()):
        key = str(st) if e == "http" else str(e)
        failed[key] = failed.get(key, 0) + 1
    return {"requests": int(len(ok)), "ok": int(ok.sum()), "failed": failed,
            "latency_ms": [round(float(v), 3) for v in np.sort(lat[ok])],
            "ttft_ms": [round(float(v), 3) for v in np.sort(ttft[ok & np.isfinite(ttft)])]}


def warmup_note(w: WarmupSummary) -> str:
    """One sentence about the warm-up, apart from every level's numbers."""
    text = (f"warm-up: {w['requests']} request(s) sent together before the first level and counted in no level: "
            f"{w['ok']} answered")
    if w["latency_ms"]:
        lat = w["latency_ms"]
        text += f" in {lat[0]:,.1f}–{lat[-1]:,.1f} ms" if len(lat) > 1 else f" in {lat[0]:,.1f} ms"
    if w["ttft_ms"]:
        t = w["ttft_ms"]
        text += f" (first token {t[0]:,.1f}–{t[-1]:,.1f} ms)" if len(t) > 1 else f" (first token {t[0]:,.1f} ms)"
    if w["failed"]:
        text += "; failed: " + ", ".join(f"{k}×{v}" for k, v in sorted(w["failed"].items()))
    return text + " (--no-warmup skips it)"
