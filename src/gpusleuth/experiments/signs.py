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
from dataclasses import dataclass, field

STEEP = 1.5
FLAT = 1.10
PREP_SHARE = 0.30


@dataclass
class Sign:
    kind: str  # "under-batched" | "over-batched" | "preprocessing-bound"
    text: str
    evidence: list[str] = field(default_factory=list)


def batching_signs(res) -> list[Sign]:
    """The signs a measured batch curve (``experiments.bench.BenchResult``) shows."""
    pts = sorted((r for r in res.batches if not r.error and r.items_per_s), key=lambda r: r.batch)
    if len(pts) < 2 or res.knee is None or res.knee.value is None:
        return []
    by = {r.batch: r for r in pts}
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
            lat = k.latency_ms["p95"] / first.latency_ms["p95"] if first.latency_ms["p95"] else float("nan")
            ev = [f"throughput ×{ratio:.1f} from batch {first.batch} to {k.batch} (×{per:.2f} per doubling)",
                  f"p95 latency ×{lat:.1f} over the same range"]
            if first.cpu_ms_per_item and k.cpu_ms_per_item and first.cpu_ms_per_item >= 2 * k.cpu_ms_per_item:
                ev.append(f"host CPU per item {first.cpu_ms_per_item:.3f} ms at batch {first.batch} vs "
                          f"{k.cpu_ms_per_item:.3f} ms at {k.batch}: per-call overhead dominates small batches")
            if res.mem_limit_bytes and k.peak_mem_bytes:
                ev.append(f"peak memory at batch {k.batch} is {k.peak_mem_bytes / res.mem_limit_bytes:.0%} of the limit")
            if first.device_util_mean is not None:
                ev.append(f"device utilization {first.device_util_mean:.0f} % at batch {first.batch}")
            out.append(Sign("under-batched", f"batches below {k.batch} are under-batched: each doubling still buys "
                                             f"×{per:.2f} throughput", ev))
    bigger = [r for r in pts if r.batch > k.batch]
    if bigger:
        last = bigger[-1]
        gain = last.items_per_s / k.items_per_s
        lat = last.latency_ms["p95"] / k.latency_ms["p95"] if k.latency_ms["p95"] else float("nan")
        if gain < FLAT and lat >= 1.5:
            ev = [f"throughput {gain - 1:+.0%} from batch {k.batch} to {last.batch}",
                  f"p95 latency ×{lat:.1f} ({k.latency_ms['p95']:.1f} → {last.latency_ms['p95']:.1f} ms)"]
            if k.peak_mem_bytes and last.peak_mem_bytes:
                ev.append(f"peak memory ×{last.peak_mem_bytes / k.peak_mem_bytes:.1f}")
            over = [r.batch for r in res.batches if not r.admissible and r.why_not.startswith("p95")]
            if over:
                ev.append(f"over the p95 budget: batch {', '.join(map(str, over))}")
            out.append(Sign("over-batched", f"batches above {k.batch} are over-batched: latency grows, throughput "
                                            "does not", ev))
    if k.stages_ms and k.stages_ms["preprocess"]["share"] >= PREP_SHARE:
        s = k.stages_ms
        out.append(Sign("preprocessing-bound",
                        f"preprocess is {s['preprocess']['share']:.0%} of a call at batch {k.batch}: the model waits "
                        "on host-side preprocessing (tokenization, decoding) — overlap it with inference in another "
                        "thread/process, or move it to the GPU",
                        [f"{name} mean {v['mean']:.2f} ms ({v['share']:.0%})" for name, v in s.items()]))
    return out
