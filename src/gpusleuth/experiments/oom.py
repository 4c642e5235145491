"""Recognising "it did not fit": the out-of-memory errors of PyTorch and Python, in-process or in a job's stderr.

A max-batch search must tell "too big" from "broken": only the first is a reason to try a smaller batch;
anything else stops the search with the error shown, instead of reporting a wrong maximum.
"""

from __future__ import annotations

import re
import sys

OOM_TEXT = re.compile(
    r"out of memory|OutOfMemoryError|MemoryError|can't allocate memory|CUBLAS_STATUS_ALLOC_FAILED|"
    r"CUDNN_STATUS_ALLOC_FAILED|HIP out of memory|failed to allocate",
    re.IGNORECASE,
)


def is_oom_exception(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")  # an exception of torch's can only come from a program that imported it
    if torch is not None:
        oom_cls = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
        if oom_cls is not None and isinstance(exc, oom_cls):
            return True
    return isinstance(exc, RuntimeError) and bool(OOM_TEXT.search(str(exc)))


def is_oom_exit(exit_code: int, stderr_tail: str) -> tuple[bool, str]:
    """(out of memory?, why) for a finished job."""
    if exit_code == 137 or exit_code == -9:
        return True, "killed by SIGKILL (the kernel's OOM killer, most likely)"
    if exit_code != 0:
        m = OOM_TEXT.search(stderr_tail or "")
        if m:
            return True, f"out of memory ({m.group(0)!r} in stderr)"
    return False, ""
