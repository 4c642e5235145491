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
}

SEVERITIES = ("none", "moderate", "high")
