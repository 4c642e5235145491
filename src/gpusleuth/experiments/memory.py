"""Peak memory of a window of this process: CUDA's allocator peak on a GPU, the resident-set peak on CPU.

On Linux the RSS high-water mark (``VmHWM``) can be reset by writing ``5`` to ``/proc/self/clear_refs``, which
gives an exact per-window peak with no sampling thread. Where that is not allowed we fall back to sampling
the current RSS after each call (a lower bound, said so in the source label).
"""

from __future__ import annotations

import os
import sys
from types import ModuleType


def _torch_cuda() -> ModuleType | None:
    """torch, when the program already uses CUDA; never imports torch (seconds) for a target that does not.
    Typed as the module it is (``sys.modules``' entry): the caller's torch, whichever version it is."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch
    except Exception:  # noqa: BLE001
        pass
    return None


class PeakMemory:
    def __init__(self) -> None:
        self.source: str | None = None
        self._sampled = 0.0
        self._hwm = False

    def reset(self) -> None:
        t = _torch_cuda()
        if t is not None:
            t.cuda.reset_peak_memory_stats()
            self.source = "CUDA max_memory_allocated"
            return
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self._hwm = True
            self.source = "peak RSS (VmHWM)"
        except OSError:
            self._hwm = False
            self.source = "RSS sampled after each call"
        self._sampled = 0.0

    def sample(self) -> None:
        if self._hwm or _torch_cuda() is not None:
            return
        rss = rss_bytes()
        if rss is not None:
            self._sampled = max(self._sampled, rss)

    def peak(self) -> float | None:
        t = _torch_cuda()
        if t is not None:
            self.source = "CUDA max_memory_allocated"
            return float(t.cuda.max_memory_allocated())
        if self._hwm:
            v = _status_kb("VmHWM")
            return v * 1024.0 if v is not None else None
        return self._sampled or None


def _status_kb(key: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def rss_bytes() -> float | None:
    v = _status_kb("VmRSS")
    if v is not None:
        return v * 1024.0
    try:
        import psutil

        return float(psutil.Process(os.getpid()).memory_info().rss)
    except Exception:  # noqa: BLE001
        return None


def device_total_bytes() -> float | None:
    t = _torch_cuda()
    if t is None:
        return None
    try:
        return float(t.cuda.get_device_properties(t.cuda.current_device()).total_memory)
    except Exception:  # noqa: BLE001
        return None
