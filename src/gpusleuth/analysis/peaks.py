"""Dense peak FLOP/s per GPU model and dtype — the MFU denominator.

Dense means without 2:4 sparsity: vendor datasheets print sparse numbers with an asterisk, and using
them halves MFU (a common mistake). Values in TFLOP/s; sources in shared/reference/whatif_mfu.md §2.4
(datasheets via Megatron-LM, torchtitan, Composer) and the datasheets of L40, H200 NVL, GB200 and V100S.
GeForce cards run FP32-accumulate tensor math at half rate, and PyTorch's bf16/fp16 matmuls accumulate in
FP32, so the RTX 4090 entry is 165, not 330.

Rows are matched on whole tokens of the NVML name (``NVIDIA L40`` is not an L4, ``NVIDIA GH200 480GB``
not an H200, ``Tesla V100S-PCIE-32GB`` not a V100 SXM2), first match wins. A MIG instance's name is its
parent's plus ``MIG <g>g.<mem>gb`` (``MIG <c>c.<g>g.<mem>gb`` for a compute instance): its peak is the parent's scaled by the instance's share of the SMs
(NVML's ``multiprocessorCount`` for the instance over the full chip's), or by ``g/7`` when the count is
unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TABLE_DATE = "2026-11"
DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8")


@dataclass(frozen=True)
class _Row:
    pattern: str  # regex over the upper-cased NVML name, on token boundaries
    model: str
    sms: int | None  # SMs of the full chip (for MIG scaling)
    peaks: dict[str, float]


def _tok(s: str) -> str:
    return rf"(?<![A-Z0-9]){s}(?![A-Z0-9])"


_ROWS: list[_Row] = [
    _Row(_tok("H100") + r".*" + _tok("NVL"), "H100 NVL", 132,
         {"bf16": 835, "fp16": 835, "tf32": 418, "fp32": 60, "fp8": 1671}),
    _Row(_tok("H100") + r".*" + _tok("PCIE"), "H100 PCIe", 114,
         {"bf16": 756, "fp16": 756, "tf32": 378, "fp32": 51, "fp8": 1513}),
    _Row(_tok("GH200"), "GH200", 132, {"bf16": 989, "fp16": 989, "tf32": 494.7, "fp32": 67, "fp8": 1979}),
    _Row(_tok("H100"), "H100 SXM", 132, {"bf16": 989, "fp16": 989, "tf32": 494.7, "fp32": 67, "fp8": 1979}),
    _Row(_tok("H200") + r".*" + _tok("NVL"), "H200 NVL", 132,
         {"bf16": 835, "fp16": 835, "tf32": 418, "fp32": 60, "fp8": 1671}),
    _Row(_tok("H200"), "H200", 132, {"bf16": 989, "fp16": 989, "tf32": 494.7, "fp32": 67, "fp8": 1979}),
    # GB200 per GPU: half of a superchip's 10 PFLOPS sparse bf16 → 2.5 dense
    _Row(_tok("GB200"), "GB200", 148, {"bf16": 2500, "fp16": 2500, "tf32": 1250, "fp8": 5000}),
    _Row(_tok("B200"), "B200", 148, {"bf16": 2250, "fp16": 2250, "tf32": 1100, "fp32": 75, "fp8": 4500}),
    _Row(_tok("A100"), "A100", 108, {"bf16": 312, "fp16": 312, "tf32": 156, "fp32": 19.5}),
    _Row(_tok("A10G"), "A10G", 80, {"bf16": 70, "fp16": 70, "tf32": 35, "fp32": 31.2}),
    _Row(_tok("A10"), "A10", 72, {"bf16": 125, "fp16": 125, "tf32": 62.5, "fp32": 31.2}),
    _Row(_tok("L40S"), "L40S", 142, {"bf16": 362, "fp16": 362, "tf32": 183, "fp32": 91.6, "fp8": 733}),
    _Row(_tok("L40"), "L40", 142, {"bf16": 181, "fp16": 181, "tf32": 90.5, "fp32": 90.5, "fp8": 362}),
    _Row(_tok("L4"), "L4", 58, {"bf16": 121, "fp16": 121, "tf32": 60, "fp32": 30.3, "fp8": 242.5}),
    _Row(_tok("T4"), "T4", 40, {"fp16": 65, "fp32": 8.1}),
    _Row(_tok("V100S"), "V100S", 80, {"fp16": 130, "fp32": 16.4}),
    _Row(_tok("V100") + r".*" + _tok("PCIE"), "V100 PCIe", 80, {"fp16": 112, "fp32": 14}),
    _Row(_tok("V100"), "V100", 80, {"fp16": 125, "fp32": 15.7}),
    _Row(_tok("4090"), "RTX 4090", 128, {"bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6, "fp8": 330.3}),
]
_COMPILED = [(re.compile(r.pattern), r) for r in _ROWS]
# a GPU-instance profile (``3g.71gb``), or a compute instance inside one (``1c.3g.71gb``: 1 of its 3 slices)
_MIG = re.compile(r"\bMIG\s+(?:(\d+)c\.)?(\d+)g\.(\d+)gb\b", re.I)


@dataclass
class Peak:
    model: str
    dtype: str
    tflops: float
    source: str  # "table (2026-11)" or "given by the user"
    mig_fraction: float | None = None  # a MIG instance's share of its parent's peak


def _row(device_name: str) -> _Row | None:
    name = _MIG.sub("", device_name).upper()
    for rx, row in _COMPILED:
        if rx.search(name):
            return row
    return None


def gpu_model(device_name: str | None) -> str | None:
    """The table's model for an NVML/torch device name (``'NVIDIA H100 80GB HBM3'`` → ``'H100 SXM'``)."""
    row = _row(device_name) if device_name else None
    return row.model if row else None


def peak_dtypes(device_name: str | None) -> tuple[str, ...]:
    """The dtypes the table has a peak for on this device (T4 and V100: fp16 and fp32 only)."""
    row = _row(device_name) if device_name else None
    return tuple(row.peaks) if row else ()


def lookup_peak(device_name: str | None, dtype: str = "bf16", sm_count: int | None = None) -> Peak | None:
    """The dense peak for a device name as NVML/torch report it (e.g. 'NVIDIA H100 80GB HBM3'); for a MIG
    instance ('NVIDIA H100 80GB HBM3 MIG 1g.10gb') the parent's peak scaled to the instance, by its SM
    count (``sm_count``) when given, else by its compute slices out of 7."""
    if not device_name:
        return None
    row = _row(device_name)
    if row is None or dtype not in row.peaks:
        return None
    tflops = float(row.peaks[dtype])
    source = f"table ({TABLE_DATE})"
    mig = _MIG.search(device_name)
    if mig is None:
        return Peak(model=row.model, dtype=dtype, tflops=tflops, source=source)
    profile = mig.group(0).split(None, 1)[1]
    slices = int(mig.group(1) or mig.group(2))
    if sm_count and row.sms:
        frac = min(sm_count / row.sms, 1.0)
        how = f"{sm_count} of {row.sms} SMs"
    else:
        frac = min(slices / 7, 1.0)
        how = f"{slices} of 7 compute slices (SM count not recorded)"
    return Peak(model=f"{row.model} MIG {profile}", dtype=dtype, tflops=tflops * frac,
                source=f"{source}, scaled to the MIG instance: {how}", mig_fraction=frac)
