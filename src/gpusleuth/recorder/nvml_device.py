"""One NVML device as the sampler holds it: its cached handle and its state — the calls switched off for it and
why, the field list it still asks for, its GPM sample pair, whether it is a MIG instance (and of which GPU) or lost.
"""

from __future__ import annotations

from typing import Any

from gpusleuth.recorder.nvml_codes import FIELDS


class NvmlDevice:
    """Cached handle and per-device state: what is disabled, the field list, the GPM sample pair."""

    __slots__ = ("index", "handle", "disabled", "fields", "field_ids", "reasons_fn", "gpm",
                 "gpm_prev", "gpm_cur", "gpm_prev_t", "mig", "lost", "parent", "slow_ids", "slow_due_ns")

    def __init__(self, index: int, handle: Any, parent: int | None = None):
        self.index = index
        self.handle = handle
        self.parent = parent  # a MIG instance: the NVML index of its GPU
        self.disabled: dict[str, str] = {}  # call name → why
        self.fields: list[tuple[str, int]] = list(FIELDS.items())
        self.field_ids: list[int] = [fid for _, fid in self.fields]
        self.reasons_fn: str | None = "nvmlDeviceGetCurrentClocksEventReasons"
        self.gpm = False
        self.gpm_prev = None
        self.gpm_cur = None
        self.gpm_prev_t: int | None = None
        self.mig = False
        self.lost = False
        # fields NVML itself timed as slow on this device (latencyUsec): read at most every SLOW_FIELD_INTERVAL_NS
        self.slow_ids: set[int] = set()
        self.slow_due_ns: int | None = None
