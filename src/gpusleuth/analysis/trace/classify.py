"""Name-based classification, evaluated once per *distinct* name and broadcast to rows by code.

Kineto gives kernels only a name (and a category); what a kernel *is* — a collective, a tensor-core
GEMM in bf16, a Triton kernel — has to be read from it. Keeping every rule here, as small pure
functions over one string, makes them easy to test and to extend when NCCL or cuBLAS rename things
(HTA missed ``ncclDevKernel_*`` for a long time because its rule only knew ``ncclKernel``).
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np

# --- device-side categories -----------------------------------------------------------------
_COMM = re.compile(r"^(nccl|rccl|ncclDevKernel|ncclKernel)|ncclKernel|ncclDevKernel|^c10d::|allreduce|"
                   r"all_reduce|allgather|all_gather|reduce_scatter|alltoall|all_to_all", re.I)


def is_comm_kernel(name: str) -> bool:
    """Collective-communication kernels: NCCL (old ``ncclKernel_*`` and new ``ncclDevKernel_*``), RCCL."""
    return bool(_COMM.search(name))


def memcpy_category(name: str) -> str:
    """``Memcpy HtoD (Pinned -> Device)`` → ``memcpy_h2d_pinned``; direction and, where Kineto records it,
    whether the host side was pinned or pageable memory (pageable copies are synchronous and slow)."""
    n = name.replace(" ", "")
    low = n.lower()
    if "htod" in low or "h2d" in low:
        d = "h2d"
    elif "dtoh" in low or "d2h" in low:
        d = "d2h"
    elif "dtod" in low or "d2d" in low:
        return "memcpy_d2d"
    else:
        return "memcpy_other"
    if "pinned" in low:
        return f"memcpy_{d}_pinned"
    if "pageable" in low:
        return f"memcpy_{d}_pageable"
    return f"memcpy_{d}"


# --- kernel families ---------------------------------------------------------------------------
# What a GEMM/conv kernel computes in is read, in order of trust, from (1) the types its name spells out
# (cuBLAS ``sm90_xmma_gemm_bf16bf16_bf16f32_…``, ``nvjet_tst_…``, trtllm-gen ``bmm_MxE4m3_MxE2m1…``,
# CUTLASS ``tensorop_bf16_s16816gemm``), (2) the enclosing op's ``Input type`` when the trace has
# shapes (see ``kernels.op_dtypes``), (3) older name habits (``sgemm``, ``h884``). TF32 versus fp32 on
# CUDA cores is only ever in the kernel: both come from fp32 tensors.
# ("conv" but not "convert": vLLM's ``_typeConvert`` norm kernels are not convolutions; "mma" but not
# "gamma"; CUTLASS kernels by their ``cutlass_80_…``/``tensorop`` names, not every template that mentions
# ``cutlass::bfloat16_t``)
_GEMM_LIKE = re.compile(r"gemm|xmma|cutlass_\d+_|tensorop|matmul|conv(?!ert)|scudnn|hcudnn|wgrad|dgrad|fprop|flash_fwd|"
                        r"flash_bwd|fmha|attention|hgemm|sgemm|dgemm|(?<![a-z])mma|[hiwgx_]mma|^nvjet_|^bmm_|gemv",
                        re.I)
# cuBLAS xmma type tokens: ``<A><B>_<mma><acc>`` (``bf16bf16_bf16f32``, ``f32f32_tf32f32``, ``f32f32_f32f32``)
_XMMA_TYPES = re.compile(r"(?:^|_)(bf16|f16|tf32|f32|f64|e4m3|e5m2|i8|s8)(?:bf16|f16|tf32|f32|f64|e4m3|e5m2|i8|s8|s32)"
                         r"(?=_)")
_XMMA_PREC = {"bf16": "bf16", "f16": "fp16", "tf32": "tf32", "f32": "fp32", "f64": "fp64", "e4m3": "fp8",
              "e5m2": "fp8", "i8": "int8", "s8": "int8"}
# cuBLAS nvjet kernels (Hopper/Blackwell, cuBLAS 12.4+): ``nvjet_<A/B><compute><C>_…`` with one letter per
# type — h fp16, t bf16, s fp32, d fp64 — and ``_tf32`` when fp32 runs as TF32
_NVJET = re.compile(r"^nvjet_([a-z])([a-z])([a-z])_(tf32_)?", re.I)
_NVJET_LETTER = {"h": "fp16", "t": "bf16", "s": "fp32", "d": "fp64"}  # other letters: the op says
# trtllm-gen block-scaled GEMMs: ``bmm_<C>_<A><B>_<acc>_…`` with types like MxE4m3, E2m1, Bfloat16, Fp16
_BMM_TYPE = re.compile(r"(Mx)?(E4m3|E5m2|E2m1|Bfloat16|Fp16|Fp32)", re.I)
_FP8_NAME = re.compile(r"e4m3|e5m2|fp8|_f8_|f8f6f4|e2m1|fp4|nvfp4|mxf4|mxf8", re.I)
# names that say the math ran on CUDA cores (SIMT / FFMA), not tensor cores
_CUDA_CORE = re.compile(r"simt|ffma|(?:^|_)sgemm|(?:^|_)dgemm|gemmk1|gemv|sgemm_|magma_sgemm|scudnn|"
                        r"(?:ampere|volta|turing|maxwell|kepler)_sgemm|_gcgemm", re.I)
_TENSOR_CORE = re.compile(
    r"884gemm|1688gemm|16816gemm|161616|hmma|wmma|imma|xmma|tensorop|gmma|_mma|mma_|"
    r"s884|h884|s1688|h1688|s16816|h16816|i8816|tf32|bf16|fp16_|_fp16|e4m3|e5m2|e2m1|flash_fwd|flash_bwd|fmha|"
    r"cutlass_80|cutlass_90|sm80_|sm90_|sm100_|ampere_h|ampere_bf|ampere_fp16|hopper|^nvjet_|^bmm_", re.I)


def is_gemm(name: str) -> bool:
    """GEMM, convolution and attention kernels (matrix math), including cuBLAS's ``nvjet_*`` and the
    block-scaled MoE GEMMs (``bmm_MxE4m3_…``) launched through ``cuLaunchKernelEx``."""
    # fbgemm_gpu's embedding/quantize kernels carry "gemm" only in the library's name
    return bool(_GEMM_LIKE.search(name.replace("fbgemm", ""))) and not name.startswith(("Memcpy", "Memset"))


def name_precision(name: str) -> str | None:
    """The math precision a GEMM kernel's name states outright (its type tokens); None when it does not."""
    low = name.lower()
    m = _NVJET.match(name)
    if m:
        ab = _NVJET_LETTER.get(m.group(1).lower())
        if ab == "fp32" and m.group(4):
            return "tf32"
        return ab
    if low.startswith("bmm_"):
        types = [t[1].lower() for t in _BMM_TYPE.findall(name.split("_t", 1)[0])]
        ins = types[1:3] if len(types) >= 3 else types[1:]
        if any(t in ("e4m3", "e5m2", "e2m1") for t in ins):
            # fp8 x fp4 block-scaled MMA runs at the fp8 rate (Blackwell kind::f8f6f4); fp4 x fp4 at fp4's
            return "fp4" if ins and all(t == "e2m1" for t in ins) else "fp8"
        if "bfloat16" in ins:
            return "bf16"
        if "fp16" in ins:
            return "fp16"
    if "xmma" in low:
        toks = _XMMA_TYPES.findall(low)
        if toks:
            mma = toks[1] if len(toks) > 1 else toks[0]
            prec = _XMMA_PREC.get(mma)
            if prec == "fp32" and "ffma" not in low and "tf32" in low:
                prec = "tf32"
            return prec
    if _FP8_NAME.search(low):
        return "fp8"
    if "bf16" in low or "bfloat16" in low:
        return "bf16"
    if "tf32" in low:
        return "tf32"
    if "s1688gemm" in low or "s1688fprop" in low or "s1688dgrad" in low or "s1688wgrad" in low:
        return "tf32"  # CUTLASS m16n8k8 with single-precision operands is the TF32 MMA shape
    return None


def precision(name: str) -> str | None:
    """Math precision read from a GEMM/conv-like kernel name alone; None when the name does not say."""
    if not is_gemm(name):
        return None
    stated = name_precision(name)
    if stated:
        return stated
    low = name.lower()
    if ("fp16" in low or "f16" in low or "half" in low or "h884" in low or "h1688" in low
            or "h16816" in low or "s884" in low or "s16816" in low or "hgemm" in low or "161616" in low):
        return "fp16"
    if "i8" in low or "int8" in low or "imma" in low:
        return "int8"
    if "dgemm" in low or "fp64" in low or "f64" in low:
        return "fp64"
    if "sgemm" in low or "fp32" in low or "f32" in low or "scudnn" in low or "<float" in low:
        return "fp32"
    return None


def is_tensor_core(name: str) -> bool:
    """GEMM kernels whose names say they use tensor cores (HMMA/IMMA/XMMA/GMMA families, CUTLASS tensorop,
    nvjet, block-scaled bmm, flash attention) — and not the fp32 ones that say FFMA/SIMT/sgemm."""
    if not is_gemm(name):
        return False
    stated = name_precision(name)
    if stated == "fp32" or stated == "fp64":
        return False
    if stated in ("tf32", "bf16", "fp16", "fp8", "fp4", "int8"):
        return True
    if _CUDA_CORE.search(name):
        return False
    return bool(_TENSOR_CORE.search(name))


#: ATen scalar types in an op's ``Input type`` → the precision names used here (floating types only: an
#: op's math precision is its narrowest floating input — fp8 GEMMs take fp32 scales, addmm an fp32 bias)
ATEN_DTYPES = {"c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
               "c10::Float8_e5m2fnuz": "fp8", "c10::Float8_e8m0fnu": "fp8", "c10::Float4_e2m1fn_x2": "fp4",
               "c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64"}
_NARROW_FIRST = ("fp4", "fp8", "bf16", "fp16", "fp32", "fp64")


def op_dtype(input_types: str) -> str | None:
    """The math dtype of an op from its ``Input type`` arg (the entries joined with ", "): its narrowest
    floating input; None when it has none (index ops, lists, scalars only)."""
    found = {ATEN_DTYPES[t] for t in input_types.split(", ") if t in ATEN_DTYPES}
    for d in _NARROW_FIRST:
        if d in found:
            return d
    return None


def kernel_precision(name: str, dtype: str | None) -> str | None:
    """A GEMM kernel's precision from its op's dtype (when the trace has shapes) and its name.

    The op's dtype is what the framework handed over; the kernel refines it only where the kernel alone
    knows: fp32 tensors run as TF32 on tensor cores or as FFMA on CUDA cores, and a fused op that takes
    bf16 activations may quantize them inside to fp8/fp4 block-scaled MMA (vLLM's ``moe_forward`` →
    ``bmm_MxE4m3_…``). Without an op dtype, the name alone decides."""
    if not is_gemm(name):
        return None
    named = precision(name)
    if dtype is None:
        return named
    if dtype == "fp32":
        if named in ("tf32", "fp32", "bf16", "fp16", "fp8", "fp4", "int8"):
            return named  # the kernel's own types (narrower ones: the op converted inside)
        return "tf32" if is_tensor_core(name) else "fp32"
    if dtype in ("bf16", "fp16") and named in ("fp8", "fp4"):
        return named
    return dtype


#: precisions that run on tensor cores (fp32 and fp64 GEMMs here are the CUDA-core ones)
TENSOR_CORE_PRECISIONS = ("tf32", "bf16", "fp16", "fp8", "fp4", "int8")


def is_triton(name: str) -> bool:
    return name.startswith("triton_") or name.startswith("triton") or "_triton_" in name


# --- host-side evidence ------------------------------------------------------------------------
# every kernel launch API seen in real traces: CUDA 13 builds of torch call ``__cudaLaunchKernel``; cuBLAS's
# nvjet and trtllm-gen kernels come through the driver's ``cuLaunchKernelEx``
_LAUNCH = {"cudaLaunchKernel", "__cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchKernelEx",
           "cudaLaunchKernel_ptsz", "cudaLaunchKernelExC_ptsz", "__cudaLaunchKernel_ptsz", "cuLaunchKernel",
           "cuLaunchKernelEx", "cuLaunchKernel_ptsz", "cuLaunchKernelEx_ptsz",
           "cudaLaunchCooperativeKernel", "cudaLaunchCooperativeKernelMultiDevice", "cudaGraphLaunch",
           "cuGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaMemcpy2DAsync", "cuMemcpyAsync",
           "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel",
           "hipGraphLaunch", "hipMemcpyAsync", "hipMemsetAsync", "hipLaunchCooperativeKernel"}
_SYNC = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
         "cudaMemcpy2D", "cuStreamSynchronize", "cuCtxSynchronize", "cuMemcpyDtoH",
         "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize", "hipMemcpy",
         "hipMemcpyWithStream", "aten::item", "aten::_local_scalar_dense"}


def is_launch(name: str) -> bool:
    """Runtime calls that enqueue device work (kernels, async copies/sets, CUDA graphs)."""
    return name in _LAUNCH


def is_sync(name: str) -> bool:
    """Host calls that block until the device catches up: explicit syncs, synchronous copies and the
    ATen ops that read a device scalar (``.item()``)."""
    return name in _SYNC


def is_data_loader(name: str) -> bool:
    """``enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__`` and Python-level ``__next__``
    frames of a DataLoader iterator."""
    return "DataLoader" in name or "dataloader" in name or name.endswith("__next__")


def is_optimizer(name: str) -> bool:
    """``Optimizer.step#Adam.step``, ``Optimizer.zero_grad#…`` — the optimizer running on the CPU thread."""
    return name.startswith("Optimizer.") or name.startswith("optimizer.")


def is_profiler_step(name: str) -> bool:
    return name.startswith("ProfilerStep#")


def step_number(name: str) -> int:
    try:
        return int(name.split("#", 1)[1])
    except (IndexError, ValueError):
        return -1


def lookup(names: list[str], predicate: Callable[[str], bool]) -> np.ndarray:
    """Boolean table over name codes (one slot past the end for safety)."""
    out = np.zeros(len(names) + 1, bool)
    for i, n in enumerate(names):
        if predicate(n):
            out[i] = True
    return out
