"""The fixed set of causes a finding can name. Ids are stable: other tools and CI match on them.

Documented in docs/report-json.md. One record per cause (:class:`Cause`: its id, the debugging stage where the
report shows it, what it means): a new cause is one line at the end of :data:`CAUSE_LIST`; never rename or
remove one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Stage = Literal["utilization", "gpu_vs_host", "stages", "batch", "input", "runtime", "sizing"]
Severity = Literal["none", "moderate", "high"]


@dataclass(frozen=True)
class Cause:
    """One cause a finding can name."""

    id: str
    stage: Stage  # where a user debugging by hand would meet it (STAGES)
    meaning: str


#: The product brief's debugging order. The report walks these stages in this order; each cause belongs to
#: the stage where a user debugging by hand would meet it.
STAGES: tuple[tuple[Stage, str], ...] = (
    ("utilization", "1. Under-utilization over time"),
    ("gpu_vs_host", "2. GPU versus host"),
    ("stages", "3. Stage times (phases, steps)"),
    ("batch", "4. Batch size"),
    ("input", "5. Input pipeline"),
    ("runtime", "6. Runtime (precision, sync, launch, host, communication)"),
    ("sizing", "7. Sizing"),
)


CAUSE_LIST: tuple[Cause, ...] = (
    Cause("input.preprocessing", "input",
          "the input pipeline's CPU work (decoding, transforms, collate) cannot keep up"),
    Cause("input.io", "input",
          "the input pipeline waits on storage or network latency, not on CPU"),
    Cause("host.launch_bound", "runtime",
          "the device waits for the CPU to launch many short kernels"),
    Cause("host.python", "runtime",
          "the device waits while the CPU runs Python or framework code"),
    Cause("sync", "gpu_vs_host",
          "the device waits on host-device synchronization, or the program leaves it idle"),
    Cause("batch.too_small", "batch",
          "batches too small to fill the device; memory headroom would allow larger ones"),
    Cause("precision", "runtime",
          "math in a slower precision than the hardware's fast path (fp32 without TF32/autocast)"),
    Cause("memory.capacity", "batch",
          "device memory is nearly full: allocator thrash, fragmentation or OOM risk"),
    Cause("communication", "runtime",
          "time lost in collective communication not hidden behind compute"),
    Cause("straggler", "stages",
          "one rank is slower and the others wait for it"),
    Cause("throttling", "utilization",
          "clocks held down by power or thermal limits"),
    Cause("sizing", "sizing",
          "the job is too small for the device: right-size or share it"),
    Cause("contention", "gpu_vs_host",
          "CPU oversubscription or cgroup throttling slows the host side"),
    Cause("phase.eval", "stages",
          "time in evaluation (expected work, not waste)"),
    Cause("phase.checkpoint", "stages",
          "time writing checkpoints"),
    Cause("phase.logging", "stages",
          "time in logging"),
    Cause("healthy", "utilization",
          "no bottleneck above the thresholds"),
    # added in issue 4 (ids above never change)
    Cause("input.transfer", "input",
          "host-to-device copies not overlapped with compute (pageable memory, no non_blocking)"),
    # added in issue 16 (serving)
    Cause("serving.preprocessing", "input",
          "a server's CPU work before/after the model (tokenization…) runs in the request path"),
    Cause("serving.under_batched", "batch",
          "a server runs one small forward per request: the accelerator idles between them"),
    Cause("serving.queueing", "stages",
          "requests wait in the server's queue for a worker: the queue dominates tail latency"),
    # added in issue 26 (batching servers)
    Cause("serving.batch_wait", "batch",
          "a batching server's requests wait for their batch: its wait window or batch size costs latency"),
    Cause("serving.outside_server", "stages",
          "clients wait outside the server's request handling: listen backlog, connection handling, too few worker processes"),
    Cause("serving.slo_miss", "stages",
          "requests missed their SLO: the part of their time that grew under load, with its fix"),
    Cause("serving.engine_capacity", "batch",
          "an LLM engine's own metrics: its KV cache full, sequences preempted, requests waiting for a slot"),
    # added in issue 27
    Cause("not_judged", "utilization",
          "too little to judge: what the device did is said, and no bottleneck is ranked (never 'healthy')"),
    # added in issue 26 (why requests missed their SLO)
    Cause("serving.prefill_behind_decode", "batch",
          "an LLM engine ran other sequences' decode steps while new prompts waited: time to first token lost to the schedule"),
    Cause("serving.too_few_replicas", "sizing",
          "one replica is full: throughput flat while requests wait, the model busy; N replicas for the load"),
    # added in issue 22 (field truth: a DataLoader with enough workers still waits)
    Cause("input.handover", "input",
          "the training thread spends its input wait receiving batches from DataLoader workers (unpickling, shared-memory hand-shakes): more workers cannot shorten it"),
    # added in issue 31 (robust input statistics)
    Cause("input.spikes", "input",
          "a few steps carry the input wait while the typical step barely waits: workers started again each epoch, a second loader or a cold cache inside the steps"),
    # added in issue 33 (hangs caught live)
    Cause("hang", "utilization",
          "the job stopped making progress (a hang, or a pause it recovered from): which rank, where, how long"),
)

# the views the rest of the code reads, derived from the one list
CAUSES: dict[str, str] = {c.id: c.meaning for c in CAUSE_LIST}
STAGE_OF_CAUSE: dict[str, Stage] = {c.id: c.stage for c in CAUSE_LIST}

SEVERITIES: tuple[Severity, ...] = ("none", "moderate", "high")
