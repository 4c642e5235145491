"""Right-sizing (ledger/analysis/sizing.py): never below the observed p99 memory plus headroom, on every card and shape.

Pure functions, no server: the end-to-end case (a real Prometheus, the oversized pod named with its MIG
profile) is tests/test_fleet_prometheus.py. MIG instance sizes are checked against what ``nvidia-smi``
printed on a real H100 80GB and H200 in MIG mode (shared/fixtures/nvidia-smi, nvidia_gpu_exporter's
captures: 1g.10gb 9984 MiB / 16 SMs, 2g.20gb 20096 MiB / 32 SMs, 3g.40gb 40448 MiB / 60 SMs; H200 1g.18gb
16384 MiB, 2g.35gb 33280 MiB, 3g.71gb 71424 MiB).
"""

from __future__ import annotations

import itertools

import pytest

from gpusleuth.analysis.cost import DEFAULT_PRICES
from gpusleuth.ledger.analysis.sizing import COMPUTE_HEADROOM, MEM_HEADROOM, mig_family, recommend

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
CARD = {H100: 81_079, H200: 143_771, "NVIDIA A100-SXM4-40GB": 40_536, "NVIDIA L40S": 46_068}


def test_mig_sizes_are_the_captured_ones():
    by_name = {p.name: p for p in mig_family(H100)[2]}
    assert (by_name["1g.10gb"].mem_mib, by_name["1g.10gb"].sms) == (9984, 16)
    assert (by_name["2g.20gb"].mem_mib, by_name["2g.20gb"].sms) == (20090, 32)  # 19.62 GiB; nvidia-smi: 20096
    assert (by_name["3g.40gb"].mem_mib, by_name["3g.40gb"].sms) == (40448, 60)
    h200 = {p.name: p.mem_mib for p in mig_family(H200)[2]}
    assert (h200["1g.18gb"], h200["2g.35gb"], h200["3g.71gb"]) == (16384, 33280, 71424)
    assert mig_family("NVIDIA L40S") is None and mig_family("Tesla T4") is None


@pytest.mark.parametrize("model,p99,act,expect", [
    (H100, 7 * 1024, 0.05, "1g.10gb"),  # 8.4 GiB needed, 6.6 SMs: the smallest slice
    (H100, 7 * 1024, 0.10, "2g.20gb"),  # 16.5 SMs > a 1g's 16: compute, not memory, decides
    (H100, 16 * 1024, 0.05, "1g.20gb"),
    (H100, 19.4 * 1024, 0.25, "3g.40gb"),  # the planted server: 2g.20gb holds the p99 but not the headroom
    (H200, 30 * 1024, 0.2, "3g.71gb"),  # 36 GiB needed: over 2g.35gb's 32.5
])
def test_mig_pick(model, p99, act, expect):
    s = recommend(model, CARD[model], p99, act, gpus=1, allocated_h=100, price=4.0, card_price=DEFAULT_PRICES,
                  card_tflops=989)
    assert s is not None and s.kind == "mig" and s.target == expect
    slices = int(expect[0])
    assert s.usd_saved == pytest.approx(100 * 4.0 * (1 - slices / 7))


def test_never_below_p99_plus_headroom_on_any_shape():
    seen = set()
    for model, p99_gib, act, gpus in itertools.product(
            [H100, H200, "NVIDIA A100-SXM4-40GB", "NVIDIA L40S"], [0.5, 3, 9, 15, 19, 30, 38, 60, 75],
            [0.0, 0.02, 0.1, 0.2, 0.4, 0.7, 0.95], [1, 2, 8]):
        p99 = p99_gib * 1024
        if p99 > CARD[model]:
            continue
        tflops = {H100: 989, H200: 989, "NVIDIA L40S": 362}.get(model, 312)
        price = {H100: 4.0, H200: 5.0, "NVIDIA L40S": 1.5}.get(model, 2.0)
        s = recommend(model, CARD[model], p99, act, gpus, 50, price, DEFAULT_PRICES, tflops)
        if s is None:
            continue
        seen.add(s.kind)
        assert s.target_mib >= p99 * (1 + MEM_HEADROOM) - 1e-6, (model, p99_gib, act, gpus, s)
        assert s.need_mib == pytest.approx(p99 * (1 + MEM_HEADROOM))
        assert 0 < s.fraction_kept < 1 and s.usd_saved == pytest.approx(50 * price * (1 - s.fraction_kept))
        if s.kind == "mig":
            sms = mig_family(model)[1]
            prof = next(p for p in mig_family(model)[2] if p.name == s.target)
            assert prof.sms >= act * (1 + COMPUTE_HEADROOM) * sms
    assert seen == {"mig", "smaller_card", "fewer_gpus", "mps"}  # every kind of advice was reached


def test_no_advice_without_evidence_or_room():
    assert recommend(H100, CARD[H100], 70 * 1024, 0.1, 1, 100, 4.0, DEFAULT_PRICES, 989) is None  # memory-bound
    assert recommend(H100, CARD[H100], 10 * 1024, 0.9, 1, 100, 4.0, DEFAULT_PRICES, 989) is None  # compute-bound
    assert recommend(H100, CARD[H100], 5 * 1024, 0.05, 1, 0.5, 4.0, DEFAULT_PRICES, 989) is None  # half an hour
    assert recommend(H100, float("nan"), 5 * 1024, 0.05, 1, 100, 4.0, DEFAULT_PRICES, 989) is None  # no FB_FREE
