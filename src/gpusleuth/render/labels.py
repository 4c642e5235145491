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
