"""The peak table against the names NVML really reports (issue 24, defect 10), and MFU's dtype.

Names: the product names NVML/nvidia-smi print (``nvidia-smi -L``, ``--query-gpu=name``); the H100, H200,
H200 MIG and L40S ones are in the captures under tests/fixtures/nvidia-smi/. Expected values are the dense
(no-sparsity) datasheet numbers, written here, not read from the table.
"""

from __future__ import annotations

import pytest

from gpusleuth.analysis import peaks
from gpusleuth.analysis.cost import DEFAULT_PRICES
from gpusleuth.analysis.mfu import MfuOptions, compute_mfu
from gpusleuth.analysis.peaks import gpu_model, lookup_peak
from gpusleuth.run.model import Run

# NVML name → (model, dense bf16 or None, dense fp16)
NAMES = {
    "NVIDIA H100 80GB HBM3": ("H100 SXM", 989, 989),
    "NVIDIA H100 PCIe": ("H100 PCIe", 756, 756),
    "NVIDIA H100 NVL": ("H100 NVL", 835, 835),
    "NVIDIA H200": ("H200", 989, 989),
    "NVIDIA H200 NVL": ("H200 NVL", 835, 835),  # 1,671 is the sparse figure
    "NVIDIA GH200 480GB": ("GH200", 989, 989),  # not the H200 row
    "NVIDIA GB200": ("GB200", 2500, 2500),  # not the B200 row
    "NVIDIA B200": ("B200", 2250, 2250),
    "NVIDIA A100-SXM4-80GB": ("A100", 312, 312),
    "NVIDIA A100-PCIE-40GB": ("A100", 312, 312),
    "NVIDIA A100 80GB PCIe": ("A100", 312, 312),
    "NVIDIA A10G": ("A10G", 70, 70),
    "NVIDIA A10": ("A10", 125, 125),
    "NVIDIA L40S": ("L40S", 362, 362),
    "NVIDIA L40": ("L40", 181, 181),  # was the L4 row: 121
    "NVIDIA L4": ("L4", 121, 121),
    "Tesla T4": ("T4", None, 65),
    "Tesla V100-SXM2-16GB": ("V100", None, 125),
    "Tesla V100-SXM2-32GB": ("V100", None, 125),
    "Tesla V100-PCIE-16GB": ("V100 PCIe", None, 112),  # was SXM2's 125
    "Tesla V100S-PCIE-32GB": ("V100S", None, 130),
    "NVIDIA GeForce RTX 4090": ("RTX 4090", 165.2, 165.2),
}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_nvml_name_to_dense_peak(name):
    model, bf16, fp16 = NAMES[name]
    assert gpu_model(name) == model
    got = lookup_peak(name, "bf16")
    assert (got.tflops if got else None) == bf16
    assert lookup_peak(name, "fp16").tflops == fp16
    assert lookup_peak(name, "bf16").model == model if bf16 else lookup_peak(name, "bf16") is None


def test_every_row_of_the_table_is_reachable_from_a_real_name():
    reached = {gpu_model(n) for n in NAMES}
    assert {r.model for r in peaks._ROWS} <= reached


def test_cards_outside_the_table_get_no_peak():
    for name in ("NVIDIA GeForce RTX 4080 SUPER", "NVIDIA GeForce RTX 2080 SUPER", None, ""):
        assert gpu_model(name) is None and lookup_peak(name) is None


def test_mig_instance_peak_is_its_share_of_the_parent():
    """H200 MIG capture (nvidia-smi -L / -q, driver 590.48): 'MIG 1c.3g.71gb' has 16 SMs, '2g.35gb' 32."""
    full = lookup_peak("NVIDIA H200", "bf16").tflops
    p = lookup_peak("NVIDIA H200 MIG 1c.3g.71gb", "bf16", sm_count=16)
    assert p.tflops == pytest.approx(full * 16 / 132) and p.model == "H200 MIG 1c.3g.71gb"
    assert "16 of 132 SMs" in p.source and p.mig_fraction == pytest.approx(16 / 132)
    p2 = lookup_peak("NVIDIA H200 MIG 2g.35gb", "bf16", sm_count=32)
    assert p2.tflops == pytest.approx(2 * p.tflops)
    # without the SM count: compute slices out of 7, said so
    p3 = lookup_peak("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "bf16")
    assert p3.tflops == pytest.approx(989 / 7) and "7 compute slices" in p3.source
    assert gpu_model("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == "H100 SXM"


def test_price_table_names_are_table_models():
    models = {r.model for r in peaks._ROWS}
    assert set(DEFAULT_PRICES) <= models


def _mfu(name: str, **kw):
    opts = MfuOptions(flops_per_step=1e15, peak_dtype=kw.pop("peak_dtype", "bf16"))
    return compute_mfu(Run(meta={}), step_time_s=0.5, tokens_per_step=None, gpu_name=name, gpus=1, sm_clock_ratio=None,
                       opts=opts, **kw)


def test_mfu_uses_the_jobs_own_dtype_where_the_card_has_no_bf16():
    """A V100 fp16 job: MFU was None by default (no bf16 row). (1e15 FLOPs per 0.5 s is no real V100 step;
    the ratio to the peak is what is checked.)"""
    m = _mfu("Tesla V100-SXM2-16GB", job_dtype="fp16")
    assert m.peak.dtype == "fp16" and m.mfu == pytest.approx(2000 / 125)
    assert "job's own GEMM dtype (fp16" in m.convention
    none = _mfu("Tesla V100-SXM2-16GB")
    assert none.mfu is None and "--peak-dtype" in none.why_not
    # the user's own choice is never overridden
    fp32 = _mfu("Tesla T4", peak_dtype="fp32", job_dtype="fp16")
    assert fp32.peak.dtype == "fp32"
    # a card with a bf16 peak keeps the bf16 convention
    assert _mfu("NVIDIA H100 80GB HBM3", job_dtype="fp16").peak.dtype == "bf16"


def test_mfu_on_a_mig_slice_is_against_the_slice():
    m = _mfu("NVIDIA H200 MIG 2g.35gb", sm_count=32)
    assert m.peak.tflops == pytest.approx(989 * 32 / 132)
    assert m.mfu == pytest.approx(2000 / (989 * 32 / 132))
