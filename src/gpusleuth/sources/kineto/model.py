"""The Kineto reader's vocabulary: event kinds from the trace's categories.

The columns it builds are :class:`gpusleuth.run.trace_data.TraceData`, a part of the Run (``Run.trace``);
each row's ``kind`` is one of the small ints below, so masks are cheap.
"""

from __future__ import annotations

from typing import Any

# Event kinds, from the Kineto category (``cat``). Small ints so masks are cheap.
OTHER, CPU_OP, RUNTIME, KERNEL, MEMCPY, MEMSET, USER_ANN, GPU_ANN, SYNC, PYTHON, TRACE = range(11)
KIND_NAMES = ["other", "cpu_op", "runtime", "kernel", "memcpy", "memset", "user_annotation",
              "gpu_user_annotation", "cuda_sync", "python_function", "trace"]
_CAT_KIND = {
    "cpu_op": CPU_OP, "operator": CPU_OP, "Operator": CPU_OP,
    "cuda_runtime": RUNTIME, "cuda_driver": RUNTIME, "Runtime": RUNTIME, "Driver": RUNTIME,
    "kernel": KERNEL, "Kernel": KERNEL,
    "gpu_memcpy": MEMCPY, "Memcpy": MEMCPY,
    "gpu_memset": MEMSET, "Memset": MEMSET,
    "user_annotation": USER_ANN, "gpu_user_annotation": GPU_ANN,
    "cuda_sync": SYNC, "python_function": PYTHON, "Trace": TRACE,
}
#: kinds that occupy the device (what "busy" means); cuda_sync rows and GPU annotations do not.
DEVICE_KINDS = (KERNEL, MEMCPY, MEMSET)


def kind_of_category(cat: Any) -> int:
    return _CAT_KIND.get(cat, OTHER) if isinstance(cat, str) else OTHER


