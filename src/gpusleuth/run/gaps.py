"""Sampler gaps in a series of sample times: where a sampler (nvidia-smi, the recorder, a scraper) went
quiet for much longer than its usual interval. Read-time losses (``sources/``) and the telemetry analysis
(``analysis/gpu_timeline.py``) both need it, so it lives with the model, below both."""

from __future__ import annotations

import numpy as np

#: a pause this many times the usual sampling interval (and at least GAP_MIN_S) is a sampler gap
GAP_FACTOR = 2.5
GAP_MIN_S = 1.5


def fmt_seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def sampler_gaps(t_ns: np.ndarray) -> tuple[float, list[tuple[int, float]]]:
    """Median sampling interval (s) and the gaps ``(start_ns, seconds)`` of one device's sorted times."""
    if len(t_ns) < 3:
        return float("nan"), []
    dt = np.diff(t_ns) / 1e9
    med = float(np.median(dt))
    limit = max(GAP_FACTOR * med, med + GAP_MIN_S)
    where = np.flatnonzero(dt > limit)
    return med, [(int(t_ns[i]), float(dt[i] - med)) for i in where]
