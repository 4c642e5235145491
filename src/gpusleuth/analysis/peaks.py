"""Dense peak FLOP/s per GPU model and dtype — the MFU denominator.

Dense means without 2:4 sparsity: vendor datasheets print sparse numbers with an asterisk, and using
them halves MFU (a common mistake). Values in TFLOP/s; sources in shared/reference/whatif_mfu.md §2.4
(datasheets via Megatron-LM, torchtitan, Composer). GeForce cards run FP32-accumulate tensor math at half
rate, and PyTorch's bf16/fp16 matmuls accumulate in FP32, so the RTX 4090 entry is 165, not 330.
"""

from __future__ import annotations

from dataclasses import dataclass

TABLE_DATE = "2026-11"
DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8")

# (match: all substrings must appear in the upper-cased device name, model, {dtype: TFLOP/s})
# Order matters: the first match wins, so specific variants come before their family.
_PEAKS: list[tuple[tuple[str, ...], str, dict[str, float]]] = [
    (("H100", "NVL"), "H100 NVL", {"bf16": 835, "fp16": 835, "tf32": 418, "fp32": 60, "fp8": 1671}),
    (("H100", "PCIE"), "H100 PCIe", {"bf16": 756, "fp16": 756, "tf32": 378, "fp32": 51, "fp8": 1513}),
    (("H100",), "H100 SXM", {"bf16": 989, "fp16": 989, "tf32": 494.7, "fp32": 67, "fp8": 1979}),
    (("H200",), "H200", {"bf16": 989, "fp16": 989, "tf32": 494.7, "fp32": 67, "fp8": 1979}),
    (("GH200",), "GH200", {"bf16": 989, "fp16": 989, "tf32": 494.7, "fp32": 67, "fp8": 1979}),
    (("B200",), "B200", {"bf16": 2250, "fp16": 2250, "tf32": 1100, "fp32": 75, "fp8": 4500}),
    (("A100",), "A100", {"bf16": 312, "fp16": 312, "tf32": 156, "fp32": 19.5}),
    (("A10G",), "A10G", {"bf16": 70, "fp16": 70, "tf32": 35, "fp32": 31.2}),
    (("A10",), "A10", {"bf16": 125, "fp16": 125, "tf32": 62.5, "fp32": 31.2}),
    (("L40S",), "L40S", {"bf16": 362, "fp16": 362, "tf32": 183, "fp32": 91.6, "fp8": 733}),
    (("L4",), "L4", {"bf16": 121, "fp16": 121, "tf32": 60, "fp32": 30.3, "fp8": 242.5}),
    (("T4",), "T4", {"fp16": 65, "fp32": 8.1}),
    (("V100",), "V100", {"fp16": 125, "fp32": 15.7}),
    (("4090",), "RTX 4090", {"bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6, "fp8": 330.3}),
]


@dataclass
class Peak:
    model: str
    dtype: str
    tflops: float
    source: str  # "table (2026-11)" or "given by the user"


def lookup_peak(device_name: str | None, dtype: str = "bf16") -> Peak | None:
    """The dense peak for a device name as NVML/torch report it (e.g. 'NVIDIA H100 80GB HBM3')."""
    if not device_name:
        return None
    name = device_name.upper()
    for needles, model, peaks in _PEAKS:
        if all(n in name for n in needles):
            if dtype not in peaks:
                return None
            return Peak(model=model, dtype=dtype, tflops=float(peaks[dtype]), source=f"table ({TABLE_DATE})")
    return None
