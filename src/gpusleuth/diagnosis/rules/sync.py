"""Host-device synchronization and launch overhead, read from a profiler trace's idle-time partition.

``sync`` (§6 C4, C5, §7 N7): the device sat idle while the host was blocked in a synchronizing call —
``cudaStreamSynchronize``/``cudaDeviceSynchronize``, a synchronous copy, or an ATen op that reads a
device scalar (``.item()``, ``.cpu()``, ``print(tensor)``). The trace analysis paints that idle time
``idle_sync`` (a wait that drains the queue is charged until the device restarts).

``host.launch_bound`` (§6 C1, §7 N8): idle time charged to kernel launches (``idle_launch``) and to the
scheduling gaps between back-to-back kernels (``idle_kernel_gap``), with mostly short kernels — the CPU
cannot issue work as fast as the device finishes it. The fix is fewer launches: ``torch.compile``, CUDA
graphs, fused/foreach optimizers, larger batches.

Thresholds: XProf's tiers for launch overhead and host time — moderate ≥ 5 %, high ≥ 15 % of step time
(sync uses ≥ 20 % for high, the input-pipeline tier, since a sync stall behaves like a data stall).
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import gain_from_seconds, no_device_trace, run_seconds, step_idle
from gpusleuth.diagnosis.rules._scope import per_rank, rank_trace

MODERATE = 0.05
SYNC_HIGH = 0.20
LAUNCH_HIGH = 0.15
SHORT_KERNELS = 0.5  # share of kernels shorter than 10 µs for the launch-bound signature


@per_rank
def sync_stalls(facts: Facts) -> list[Finding] | Missing:
    t = rank_trace(facts)
    if t is None:
        return no_device_trace(facts, "host-device synchronization", "sync", "a profiler trace with GPU activity")
    idle, total = step_idle(t, ("idle_sync",))
    if not total or idle / total < MODERATE:
        return []
    share = idle / total
    return [Finding(
        cause="sync", severity="high" if share >= SYNC_HIGH else "moderate",
        title=f"The device idles {share:.0%} of each step while the host waits on a synchronization",
        summary=("The host blocked in synchronizing calls (.item(), .cpu(), print(tensor), "
                 "torch.cuda.synchronize(), synchronous copies) and the device drained its queue and "
                 "waited for the next launch."),
        evidence=[Evidence("idle: host synchronization", round(share * 100, 1), "% of step time",
                           f"profiler trace {t.label}"),
                  Evidence("profiled steps", len(t.steps), "", "profiler trace")],
        fix=("Remove per-step host syncs: accumulate metrics on the device (`running += loss.detach()`) "
             "and call `.item()` once every N steps; no `print(tensor)` in the loop; copy with "
             "`non_blocking=True` from pinned memory; drop explicit `torch.cuda.synchronize()`."),
        estimated_gain=gain_from_seconds(facts, run_seconds(facts, share),
                                         "the sync-idle share of the profiled steps (the waits, and the host's "
                                         "work between back-to-back syncs such as formatting a printed tensor) "
                                         "disappears once the host runs ahead of the device — a lower bound: "
                                         "the host's own time in those statements goes too, and a host-bound "
                                         "loop gains that (on an H200, 0.55 ms of sync idle a step where "
                                         "removing a per-step print(tensor) saved 1.2 ms)"),
        confidence="high" if len(t.steps) >= 3 else "medium",
    )]


@per_rank
def launch_bound(facts: Facts) -> list[Finding] | Missing:
    t = rank_trace(facts)
    if t is None:
        return no_device_trace(facts, "launch-bound", "host.launch_bound", "a profiler trace with GPU activity")
    idle, total = step_idle(t, ("idle_launch", "idle_kernel_gap"))
    sk = t.kernels.short_kernels
    short = sk.count_share if sk is not None else 0.0  # no kernels: none short
    if not total or idle / total < MODERATE or short < SHORT_KERNELS:
        return []
    share = idle / total
    lst = t.launch
    return [Finding(
        cause="host.launch_bound", severity="high" if share >= LAUNCH_HIGH else "moderate",
        title=f"Launch-bound: {share:.0%} of step time the device waits for the next kernel launch",
        summary=(f"{short:.0%} of kernels run shorter than 10 µs, and the device waits on launches between "
                 "them: the CPU cannot issue work as fast as the GPU finishes it."),
        evidence=[Evidence("idle: launch + inter-kernel gaps", round(share * 100, 1), "% of step time",
                           f"profiler trace {t.label}"),
                  Evidence("kernels < 10 µs", round(short * 100, 1), "% of kernels", "profiler trace"),
                  Evidence("launch cost (median)", lst.launch_cost_us.median, "µs",
                           "profiler trace runtime calls"),
                  Evidence("ops shorter than their launch", round(lst.ops_shorter_than_launch.share * 100, 1),
                           "% of ops", "profiler trace")],
        fix=("`model = torch.compile(model, mode=\"reduce-overhead\")` (fuses small ops and replays them as "
             "a CUDA graph); or capture the step with `torch.cuda.graphs`; use fused/foreach optimizers "
             "(`torch.optim.AdamW(..., fused=True)`); raise the batch size so each kernel does more work."),
        estimated_gain=gain_from_seconds(facts, run_seconds(facts, share),
                                         "the launch/gap idle share of the profiled steps disappears when the "
                                         "step is one graph launch (upper bound)"),
        confidence="medium",
    )]
