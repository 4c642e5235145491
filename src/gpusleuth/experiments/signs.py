"""The product brief's under-/over-batched rules of thumb, made precise on a measured curve.

* Under-batched: throughput still rising steeply with batch (≥ ×1.5 per doubling up to the knee), latency
  rising much less, memory headroom, high per-item CPU overhead at small batches, low device utilization.
* Over-batched: past the knee throughput flattens (< +10 % over the whole range beyond it) while p95 latency
  and memory keep growing.
* Preprocessing-bound: the ``preprocess`` stage is a large share of a call's latency at the knee.

Each sign is a sentence plus the numbers it rests on; a sign whose numbers are missing is not stated.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from gpusleuth.experiments.bench_result import BatchResult, BenchResult, Sign

STEEP = 1.5
FLAT = 1.10
PREP_SHARE = 0.30


class _Point(NamedTuple):
    """A batch size that produced a throughput, with its p95 latency (a row has both or neither)."""

    batch: int
    items_per_s: float
    p95_ms: float
    row: BatchResult


def batching_signs(res: BenchResult) -> list[Sign]:
    """The signs a measured batch curve shows."""
    pts = sorted((_Point(r.batch, r.items_per_s, r.latency_ms["p95"], r) for r in res.batches
                  if not r.error and r.items_per_s and r.latency_ms is not None), key=lambda p: p.batch)
    if len(pts) < 2 or res.knee is None or res.knee.value is None:
        return []
    by = {p.batch: p for p in pts}
    k = by.get(int(res.knee.value))
    if k is None:
        return []
    out = []
    first = pts[0]
    if k.batch > first.batch:
        ratio = k.items_per_s / first.items_per_s
        doublings = math.log2(k.batch / first.batch)
        per = ratio ** (1 / doublings) if doublings > 0 else ratio
        if per >= STEEP:
            lat = k.p95_ms / first.p95_ms if first.p95_ms else float("nan")
            ev = [f"throughput ×{ratio:.1f} from batch {first.batch} to {k.batch} (×{per:.2f} per doubling)",
                  f"p95 latency ×{lat:.1f} over the same range"]
            f_cpu, k_cpu = first.row.cpu_ms_per_item, k.row.cpu_ms_per_item
            if f_cpu and k_cpu and f_cpu >= 2 * k_cpu:
                ev.append(f"host CPU per item {f_cpu:.3f} ms at batch {first.batch} vs "
                          f"{k_cpu:.3f} ms at {k.batch}: per-call overhead dominates small batches")
            if res.mem_limit_bytes and k.row.peak_mem_bytes:
                ev.append(f"peak memory at batch {k.batch} is {k.row.peak_mem_bytes / res.mem_limit_bytes:.0%} of the limit")
            if first.row.device_util_mean is not None:
                ev.append(f"device utilization {first.row.device_util_mean:.0f} % at batch {first.batch}")
            out.append(Sign("under-batched", f"batches below {k.batch} are under-batched: each doubling still buys "
                                             f"×{per:.2f} throughput", ev))
    bigger = [r for r in pts if r.batch > k.batch]
    if bigger:
        last = bigger[-1]
        gain = last.items_per_s / k.items_per_s
        lat = last.p95_ms / k.p95_ms if k.p95_ms else float("nan")
        if gain < FLAT and lat >= 1.5:
            ev = [f"throughput {gain - 1:+.0%} from batch {k.batch} to {last.batch}",
                  f"p95 latency ×{lat:.1f} ({k.p95_ms:.1f} → {last.p95_ms:.1f} ms)"]
            k_mem, last_mem = k.row.peak_mem_bytes, last.row.peak_mem_bytes
            if k_mem and last_mem:
                ev.append(f"peak memory ×{last_mem / k_mem:.1f}")
            over = [r.batch for r in res.batches if not r.admissible and r.why_not.startswith("p95")]
            if over:
                ev.append(f"over the p95 budget: batch {', '.join(map(str, over))}")
            out.append(Sign("over-batched", f"batches above {k.batch} are over-batched: latency grows, throughput "
                                            "does not", ev))
    if k.row.stages_ms and k.row.stages_ms["preprocess"]["share"] >= PREP_SHARE:
        s = k.row.stages_ms
        out.append(Sign("preprocessing-bound",
                        f"preprocess is {s['preprocess']['share']:.0%} of a call at batch {k.batch}: the model waits "
                        "on host-side preprocessing (tokenization, decoding) — overlap it with inference in another "
                        "thread/process, or move it to the GPU",
                        [f"{name} mean {v['mean']:.2f} ms ({v['share']:.0%})" for name, v in s.items()]))
    return out
