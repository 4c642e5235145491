"""What each trace partition category is called on screen: one table for the terminal, the HTML page and
the annotated Perfetto trace, so the three say the same thing about the same seconds."""

from __future__ import annotations

CATEGORY_LABELS = {
    "compute": "compute kernels", "comm": "communication (exposed)",
    "memcpy_h2d_pinned": "copy H2D (pinned)", "memcpy_h2d_pageable": "copy H2D (pageable)",
    "memcpy_h2d": "copy H2D", "memcpy_d2h_pinned": "copy D2H (pinned)",
    "memcpy_d2h_pageable": "copy D2H (pageable)", "memcpy_d2h": "copy D2H", "memcpy_d2d": "copy D2D",
    "memcpy_other": "copy (other)", "memset": "memset",
    "idle_dependency": "idle: waiting on a dependency (work queued)",
    "idle_kernel_gap": "idle: gaps between queued kernels",
    "idle_sync": "idle: host synchronization", "idle_data_loader": "idle: data loader",
    "idle_optimizer_cpu": "idle: optimizer on CPU", "idle_launch": "idle: launch-bound",
    "idle_host": "idle: host-bound (Python/framework)", "idle_other": "idle: no host activity recorded",
}

#: The same categories on a CPU-only trace (no device): nothing sits idle — the host time inside ops is the
#: computation itself (ATen on the CPU), and the time with no op running is the interpreter between ops.
#: Calling it "idle: host-bound" told a user that an HF Trainer step's 37.65 of 44.6 ms of matrix math was
#: idle time (issue 27).
CPU_ONLY_LABELS = {
    **CATEGORY_LABELS,
    "idle_host": "CPU ops (the computation, on the host)",
    "idle_other": "between ops (Python, framework)",
    "idle_data_loader": "data loader",
    "idle_optimizer_cpu": "optimizer step",
    "idle_sync": "synchronization",
    "idle_launch": "launch calls",
}


def category_labels(cpu_only: bool) -> dict[str, str]:
    """The labels for a trace's partition: the device's words, or the host's on a CPU-only trace."""
    return CPU_ONLY_LABELS if cpu_only else CATEGORY_LABELS


def cpu_only_note(step_time_s: float | None) -> str:
    """The line that replaces "Device span 0.00 ms" on a CPU-only trace."""
    return ("CPU-only trace: no device work was recorded, so there is no device span and no device idle time; "
            "each step below is host time — inside CPU ops (the computation) or between them (Python).")
