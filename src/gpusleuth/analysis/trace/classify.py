"""Name-based classification, evaluated once per *distinct* name and broadcast to rows by code.

Kineto gives kernels only a name (and a category); what a kernel *is* — a collective, a tensor-core
GEMM in bf16, a Triton kernel — has to be read from it. Keeping every rule here, as small pure
functions over one string, makes them easy to test and to extend when NCCL or cuBLAS rename things
(HTA missed ``ncclDevKernel_*`` for a long time because its rule only knew ``ncclKernel``).
"""

from __future__ import annotations

import re

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
_TENSOR_CORE = re.compile(
    r"884gemm|1688gemm|16816gemm|161616|hmma|wmma|imma|xmma|tensorop|gmma|_mma|mma_|"
    r"s884|h884|s1688|h1688|s16816|h16816|i8816|tf32|bf16|fp16_|_fp16|e4m3|e5m2|flash_fwd|flash_bwd|fmha|"
    r"cutlass_80|cutlass_90|sm80_|sm90_|sm100_|ampere_h|ampere_bf|ampere_fp16|hopper", re.I)
_GEMM_LIKE = re.compile(r"gemm|xmma|cutlass|matmul|conv|scudnn|hcudnn|wgrad|dgrad|fprop|flash|fmha|attention|"
                        r"hgemm|sgemm|dgemm|mma", re.I)


def is_tensor_core(name: str) -> bool:
    """Kernels whose names say they use tensor cores (HMMA/IMMA/XMMA/GMMA families, cutlass tensorop,
    reduced-precision cuBLAS/cuDNN kernels, flash attention). A name heuristic, stated as such."""
    return bool(_TENSOR_CORE.search(name)) and bool(_GEMM_LIKE.search(name) or "mma" in name.lower())


def precision(name: str) -> str | None:
    """Math precision read from a GEMM/conv-like kernel name; None when the name does not say."""
    low = name.lower()
    if not _GEMM_LIKE.search(low):
        return None
    if "e4m3" in low or "e5m2" in low or "fp8" in low:
        return "fp8"
    if "bf16" in low or "bfloat16" in low:
        return "bf16"
    if "tf32" in low:
        return "tf32"
    if ("fp16" in low or "f16" in low or "half" in low or "__half" in low or "h884" in low or "h1688" in low
            or "h16816" in low or "s884" in low or "s1688" in low or "s16816" in low or "hgemm" in low):
        return "fp16"
    if "i8" in low or "int8" in low or "imma" in low:
        return "int8"
    if "dgemm" in low or "fp64" in low or "f64" in low:
        return "fp64"
    if "sgemm" in low or "fp32" in low or "f32" in low or "scudnn" in low or "<float" in low:
        return "fp32"
    return None


def is_triton(name: str) -> bool:
    return name.startswith("triton_") or name.startswith("triton") or "_triton_" in name


# --- host-side evidence ------------------------------------------------------------------------
_LAUNCH = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
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


def lookup(names: list[str], predicate) -> np.ndarray:
    """Boolean table over name codes (one slot past the end for safety)."""
    out = np.zeros(len(names) + 1, bool)
    for i, n in enumerate(names):
        if predicate(n):
            out[i] = True
    return out
