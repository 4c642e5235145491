"""The fixed set of causes a finding can name. Ids are stable: other tools and CI match on them.

Documented in docs/report-json.md. Add causes at the end; never rename or remove one.
"""

CAUSES: dict[str, str] = {
    "input.preprocessing": "the input pipeline's CPU work (decoding, transforms, collate) cannot keep up",
    "input.io": "the input pipeline waits on storage or network latency, not on CPU",
    "host.launch_bound": "the device waits for the CPU to launch many short kernels",
    "host.python": "the device waits while the CPU runs Python or framework code",
    "sync": "the device waits on host-device synchronization, or the program leaves it idle",
    "batch.too_small": "batches too small to fill the device; memory headroom would allow larger ones",
    "precision": "math in a slower precision than the hardware's fast path (fp32 without TF32/autocast)",
    "memory.capacity": "device memory is nearly full: allocator thrash, fragmentation or OOM risk",
    "communication": "time lost in collective communication not hidden behind compute",
    "straggler": "one rank is slower and the others wait for it",
    "throttling": "clocks held down by power or thermal limits",
    "sizing": "the job is too small for the device: right-size or share it",
    "contention": "CPU oversubscription or cgroup throttling slows the host side",
    "phase.eval": "time in evaluation (expected work, not waste)",
    "phase.checkpoint": "time writing checkpoints",
    "phase.logging": "time in logging",
    "healthy": "no bottleneck above the thresholds",
    # added in issue 4 (ids above never change)
    "input.transfer": "host-to-device copies not overlapped with compute (pageable memory, no non_blocking)",
    # added in issue 16 (serving)
    "serving.preprocessing": "a server's CPU work before/after the model (tokenization…) runs in the request path",
    "serving.under_batched": "a server runs one small forward per request: the accelerator idles between them",
    "serving.queueing": "requests wait in the server's queue for a worker: the queue dominates tail latency",
    # added in issue 26 (batching servers)
    "serving.batch_wait": "a batching server's requests wait for their batch: its wait window or batch size costs latency",
    "serving.outside_server": "clients wait outside the server's request handling: listen backlog, connection handling, too few worker processes",
    "serving.slo_miss": "requests missed their SLO: the part of their time that grew under load, with its fix",
    "serving.engine_capacity": "an LLM engine's own metrics: its KV cache full, sequences preempted, requests waiting for a slot",
    # added in issue 27
    "not_judged": "too little to judge: what the device did is said, and no bottleneck is ranked (never 'healthy')",
    # added in issue 26 (why requests missed their SLO)
    "serving.prefill_behind_decode": "an LLM engine ran other sequences' decode steps while new prompts waited: time to first token lost to the schedule",
    "serving.too_few_replicas": "one replica is full: throughput flat while requests wait, the model busy; N replicas for the load",
    # added in issue 22 (field truth: a DataLoader with enough workers still waits)
    "input.handover": "the training thread spends its input wait receiving batches from DataLoader workers (unpickling, shared-memory hand-shakes): more workers cannot shorten it",
    # added in issue 31 (robust input statistics)
    "input.spikes": "a few steps carry the input wait while the typical step barely waits: workers started again each epoch, a second loader or a cold cache inside the steps",
    # added in issue 33 (hangs caught live)
    "hang": "the job stopped making progress (a hang, or a pause it recovered from): which rank, where, how long",
}

#: The product brief's debugging order. The report walks these stages in this order; each cause belongs to
#: the stage where a user debugging by hand would meet it.
STAGES: tuple[tuple[str, str], ...] = (
    ("utilization", "1. Under-utilization over time"),
    ("gpu_vs_host", "2. GPU versus host"),
    ("stages", "3. Stage times (phases, steps)"),
    ("batch", "4. Batch size"),
    ("input", "5. Input pipeline"),
    ("runtime", "6. Runtime (precision, sync, launch, host, communication)"),
    ("sizing", "7. Sizing"),
)

STAGE_OF_CAUSE: dict[str, str] = {
    "throttling": "utilization",
    "sync": "gpu_vs_host",
    "contention": "gpu_vs_host",
    "phase.eval": "stages",
    "phase.checkpoint": "stages",
    "phase.logging": "stages",
    "straggler": "stages",
    "batch.too_small": "batch",
    "memory.capacity": "batch",
    "input.preprocessing": "input",
    "input.io": "input",
    "input.transfer": "input",
    "input.handover": "input",
    "input.spikes": "input",
    "host.launch_bound": "runtime",
    "host.python": "runtime",
    "precision": "runtime",
    "communication": "runtime",
    "sizing": "sizing",
    "healthy": "utilization",
    "not_judged": "utilization",
    "serving.preprocessing": "input",
    "serving.under_batched": "batch",
    "serving.queueing": "stages",
    "serving.batch_wait": "batch",
    "serving.outside_server": "stages",
    "serving.slo_miss": "stages",
    "serving.engine_capacity": "batch",
    "serving.prefill_behind_decode": "batch",
    "serving.too_few_replicas": "sizing",
    "hang": "utilization",
}

SEVERITIES = ("none", "moderate", "high")
