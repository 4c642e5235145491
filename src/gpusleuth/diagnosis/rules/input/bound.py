"""The rule ``input_bound``: is the training loop waiting on its data, and is that CPU work or latency?

It measures the steady steps' exposed data wait, names its cause from the CPU evidence (``_shared`` says how),
asks that cause's module for the prediction and the fix (``preprocessing``, ``io_wait``, ``handover``; a wait a few
steps carry: ``spikes``) and prices the finding.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing, Severity
from gpusleuth.diagnosis.rules.host import foreign_cores
from gpusleuth.diagnosis.rules._common import gain_from_seconds, host_cpu_p50, no_steps
from gpusleuth.diagnosis.rules._framework import loader_fix
from gpusleuth.diagnosis.rules.input import handover, io_wait, preprocessing
from gpusleuth.diagnosis.rules.input._shared import (
    BUSY, BUSY_STARVED, HANDOVER, HIGH, HOST_SATURATED_PCT, IN_MEMORY_CHARS, IN_MEMORY_HANDOVER, MODERATE,
    NO_LOADER_FIX, NO_STORAGE_BYTES, WORKERS_IDLE_PCT, WORKERS_SATURATED_PCT, WORKERS_WANT, InputWait,
    _wait_cpu_demand, training_loader)
from gpusleuth.diagnosis.rules.input.spikes import spike_steps

#: host-to-device copy calls at least this share of the pre-forward wait: the wait is the copy, not loading
COPY_OWNS_WAIT = 0.5


def _copy_in_wait(facts: Facts) -> float:
    """Seconds a profiled step spent inside host-to-device copy calls (one process's trace; 0 without one): in
    a loop without a DataLoader they lie in the pre-forward wait the step instrumentation measures."""
    traces = facts.traces
    if len(traces) != 1 or not traces[0].copy_calls.steps:
        return 0.0
    cc = traces[0].copy_calls
    return cc.h2d_call_s / cc.steps


def input_bound(facts: Facts) -> list[Finding] | Missing:
    s = facts.outcomes.steps
    if not s.steps:
        return no_steps("input-bound", "input.preprocessing")
    if s.data_wait_measured_steps == 0:
        return Missing(rule="input-bound", needs="the steps' input wait (no DataLoader fetch and no module "
                       "forward was seen in any step)", how="iterate your batches through "
                       "`gpusleuth.watch(batches)` or a DataLoader", cause="input.preprocessing")
    # Steady state: leave out the first step when there are enough, since it carries the loader workers'
    # start-up (fork, imports, first prefetch) — a one-off cost per epoch that no worker count removes.
    first = facts.first_step if s.steps >= 5 else {}
    # ... and the steps gpusleuth's own profiler or FLOP counter slowed: their gaps hold our work, not input
    slowed = s.instrumented_steps if s.steps - s.instrumented_steps - (1 if first else 0) >= 3 else 0
    n_steps = s.steps - (1 if first else 0) - slowed
    wait_s = s.data_wait_s - first.get("data_wait_s", 0.0) - (s.instrumented_wait_s if slowed else 0.0)
    cpu_s = s.data_cpu_s - first.get("data_cpu_s", 0.0) - (s.instrumented_cpu_s if slowed else 0.0)
    body_s = s.step_time_s - first.get("duration_s", 0.0) - (s.instrumented_s if slowed else 0.0)
    share = wait_s / body_s if body_s > 0 else 0.0
    if share < MODERATE:
        return []
    # the loop's input is its DataLoader only where its steps fetch from one: a loader read once (a fixed batch
    # reused by every step) makes the waits the pre-forward gap's, and "waited on its DataLoader" untrue
    fed = s.fetching_steps is None or 2 * s.fetching_steps >= s.steps
    loader = training_loader(facts) if fed else None
    # the cause rests on the typical step: a mean that a few long waits carry (workers started again at each
    # epoch, an evaluation loader's fetches the steps hold) says nothing about storage or CPU
    typical = max(wait_s - s.data_wait_spike_s, 0.0) / body_s if body_s > 0 else 0.0
    if typical < MODERATE and s.data_wait_spike_steps:
        return spike_steps(facts, loader, share, typical, body_s)
    copy_mean = _copy_in_wait(facts) if loader is None else 0.0
    if copy_mean >= COPY_OWNS_WAIT * (wait_s / max(n_steps, 1)):
        # the pre-forward wait is mostly the host copying its batch from pageable memory (a synchronous call the
        # thread CPU clock reads as busy): that is input.transfer's finding, with the copy's own prediction;
        # "preprocessing" and more workers would be false (an H200 run read HIGH input.preprocessing ×1.64 where
        # pinning measured ×3.1)
        return []
    if copy_mean > 0:  # the rest of the wait is the loop's; the copy stays where it is whatever loads the data
        wait_s = max(wait_s - copy_mean * n_steps, 0.0)
        cpu_s = max(cpu_s - copy_mean * n_steps, 0.0)
        share = wait_s / body_s if body_s > 0 else 0.0
        typical = max(wait_s - s.data_wait_spike_s, 0.0) / body_s if body_s > 0 else 0.0
        if share < MODERATE:
            return []
    severity: Severity = "high" if typical >= HIGH else "moderate"
    workers = loader.get("num_workers") if loader else None
    what = "its DataLoader" if loader else "its input (no DataLoader: the time from a step's end to the next forward)"
    cpu_source = ("thread CPU clock around DataLoader fetches" if loader else
                  "thread CPU clock from a step's end to the next forward")
    cores = facts.logical_cores or 1
    step_mean = body_s / n_steps
    wait_mean = wait_s / n_steps
    compute_mean = max(step_mean - wait_mean, 0.0)
    host = facts.host
    evidence = [
        Evidence("exposed data wait", round(share * 100, 1), "% of step time", "step instrumentation"),
        Evidence("data wait per step", round(wait_mean * 1e3, 2), "ms", "step instrumentation"),
        Evidence("rest of step (compute)", round(compute_mean * 1e3, 2), "ms", "step instrumentation"),
    ]
    if copy_mean > 0:
        evidence.append(Evidence("of the wait, host-to-device copy calls (left to input.transfer)",
                                 round(copy_mean * 1e3, 2), "ms per profiled step", "profiler trace copy calls"))
    if first:
        evidence.append(Evidence("first step's data wait (start-up, left out)", round(first.get("data_wait_s", 0.0) * 1e3, 1),
                                 "ms", "step instrumentation"))
    if workers is not None:
        evidence.append(Evidence("DataLoader num_workers", workers, "", "DataLoader seen at run time"))

    # --- preprocessing (CPU) or I/O (latency)? ---
    # On a host crowded by processes outside the job, the CPU a loader got says little about the work it had:
    # no "host saturated, so CPU-bound" inference, and the severity stays moderate (foreign_load says why).
    # What the threads *wanted* does (their schedstat clocks: running, or runnable and waiting for a CPU), on
    # any host: a loader starved by others' load wants a CPU; one waiting on storage wants none.
    foreign = foreign_cores(facts)
    if foreign is not None:
        severity = "moderate"
        evidence.append(Evidence("cores used outside the job during the steps", round(foreign, 2), "cores",
                                 "host − job process samples"))
    busy_ratio = cpu_s / wait_s if wait_s > 0 else 0.0
    worker_cpu = host.worker_cpu_pct_mean if host else None
    kind = None
    starved = False  # the split came from what the threads wanted (schedstat), not what they got
    handover_mean = 0.0  # the training thread's own receiving of batches from workers, per step
    if workers == 0 or (workers is None and worker_cpu is None):
        evidence.append(
            Evidence("main-thread CPU while waiting", round(busy_ratio * 100, 1), "% of the wait", cpu_source)
        )
        kind = "input.preprocessing" if busy_ratio >= BUSY else "input.io"
        host_cpu = host_cpu_p50(facts)
        if kind == "input.io" and busy_ratio >= BUSY_STARVED and host_cpu is not None and \
                host_cpu >= HOST_SATURATED_PCT and foreign is None:
            kind = "input.preprocessing"  # a CPU-bound loader on a saturated host gets only a slice of a core
            evidence.append(Evidence("host CPU (median)", round(host_cpu, 1), "% — loading starved of CPU", "host sampler"))
        wanted = _wait_cpu_demand(host.main_cpu_demand if host else None, share)
        if wanted is not None and host is not None and (kind == "input.preprocessing" or wanted >= BUSY):
            evidence.append(Evidence(
                "main thread wanting a CPU during the wait (at least)", round(wanted * 100, 1),
                f"% of the wait; runnable but waiting for a CPU {100 * (host.main_run_delay_share or 0.0):.0f} % "
                "of the steps' time", "schedstat: main thread run + run delay"))
            if kind == "input.io":
                kind = "input.preprocessing"  # the loading is CPU work that got too little CPU: starved
                starved = True
        prep_cpu_per_step = cpu_s / n_steps
    else:
        # With workers, the training thread's CPU inside its waits is its share of the loading: receiving each
        # batch from a worker (unpickling, the shared-memory hand-shake per tensor). More workers cannot hide it.
        handover_mean = cpu_s / n_steps
        evidence.append(Evidence("training thread on a CPU while waiting (receiving batches)",
                                 round(handover_mean * 1e3, 2), f"ms per step, {busy_ratio:.0%} of the wait",
                                 cpu_source))
        if worker_cpu is not None:
            evidence.append(Evidence("loader worker CPU (mean)", round(worker_cpu, 1), "% of one core",
                                     "process sampler"))
            kind = "input.preprocessing" if worker_cpu >= WORKERS_SATURATED_PCT else (
                "input.io" if worker_cpu < WORKERS_IDLE_PCT else "input.preprocessing")
            host_cpu = host_cpu_p50(facts)
            if (kind == "input.io" and worker_cpu >= 100 * BUSY_STARVED * 2 and host_cpu is not None
                    and host_cpu >= HOST_SATURATED_PCT and foreign is None):
                # idle-looking workers on a saturated host are starved of CPU, not waiting on storage
                kind = "input.preprocessing"
                evidence.append(Evidence("host CPU (median)", round(host_cpu, 1), "% — workers starved of CPU",
                                         "host sampler"))
            demand = host.worker_cpu_demand if host else None
            if kind == "input.io" and demand is not None and demand >= WORKERS_WANT:
                kind = "input.preprocessing"  # busy-looking no, but wanting a CPU all along: starved
                starved = True
                evidence.append(Evidence("loader workers wanting a CPU (running or runnable)", round(demand * 100, 1),
                                         "% of the steps' time (mean per worker)", "schedstat: run + run delay"))
            runnable = host.worker_runnable_share if host and demand is None else None
            if kind == "input.io" and runnable is not None and runnable >= 0.5 and foreign is None:
                # Busy-looking no, but runnable: the workers want a CPU and don't get one (contention).
                kind = "input.preprocessing"
                evidence.append(Evidence("loader workers runnable (not sleeping)", round(runnable * 100, 1),
                                         "% of samples", "process sampler (/proc state R)"))
        else:  # workers whose CPU was not sampled: the training thread's CPU is all the evidence there is
            kind = "input.io"
        if kind != "input.preprocessing" and busy_ratio >= HANDOVER:
            kind = "input.handover"  # the workers keep up; the training thread's own receiving is the wait
        n = workers or (host.workers if host else 0) or 1
        prep_cpu_per_step = (worker_cpu or 0.0) / 100.0 * n * step_mean
    # --- did the loading read anything? (/proc/PID/io of the loading processes over the steps) ---
    read_bytes = host.loader_read_bytes if host else None
    read_chars = host.loader_read_chars if host else None
    no_storage = read_bytes is not None and read_bytes / max(s.steps, 1) < NO_STORAGE_BYTES
    in_memory = no_storage and read_chars is not None and read_chars / max(s.steps, 1) < IN_MEMORY_CHARS
    if read_bytes is not None:
        evidence.append(Evidence(
            f"read by the loading {'workers' if workers else 'process'} during the steps",
            round(read_bytes / max(s.steps, 1) / 1024, 1),
            "KiB a step from storage" + (f", {read_chars / max(s.steps, 1) / 1024:.1f} KiB through any read call"
                                         if read_chars is not None else ""),
            "/proc/PID/io (read_bytes, rchar)"))
    if workers and kind == "input.io" and in_memory and busy_ratio >= IN_MEMORY_HANDOVER:
        # idle workers that read nothing, and a training thread busy receiving for a good part of its wait: the
        # data set is in memory and the wait is each batch's hand-over from a worker process (field case: a
        # TensorDataset with 2 workers read "waits on storage" at 34-48 % of the wait on a CPU, just under
        # HANDOVER). Workers that read nothing but sleep (a remote call, a lock, a planted latency) leave the
        # training thread idle in its wait (1-14 %): latency, still input.io
        kind = "input.handover"
    if host and host.iowait_pct:
        evidence.append(Evidence("host iowait (mean)", round(host.iowait_pct["mean"], 1), "%", "host sampler"))

    # --- prediction: with enough workers, loading overlaps compute — on the cores that were free ---
    usable_cores = facts.usable_cores or float(cores)
    usable = max(1, int(usable_cores) - 1)  # leave one core for the training loop itself
    wait = InputWait(workers=workers, what=what, share=share, step_mean=step_mean,
                     wait_mean=wait_mean, compute_mean=compute_mean, busy_ratio=busy_ratio, worker_cpu=worker_cpu,
                     handover_mean=handover_mean, prep_cpu_per_step=prep_cpu_per_step, no_storage=no_storage,
                     in_memory=in_memory, usable_cores=usable_cores, usable=usable, evidence=evidence)
    cause = {"input.preprocessing": preprocessing, "input.handover": handover}.get(kind or "", io_wait)
    r = cause.remedy(facts, wait, loader)
    title, summary, fix_lines, per_step_after = r.title, r.summary, r.fix_lines, r.per_step_after
    method, new_workers, still_loader_bound = r.method, r.new_workers, r.still_loader_bound
    if loader is None and fix_lines and not still_loader_bound:
        fix_lines[0] = NO_LOADER_FIX.format(loader=loader_fix(facts, new_workers).split(" in your")[0])
    spike_mean = s.data_wait_spike_s / n_steps
    if spike_mean > 0 and kind != "input.handover":
        # the few long waits (epoch boundaries…) are not more workers' to remove: they stay (a hand-over's fix
        # shortens every hand-over, the long ones too: its bound stays the whole wait)
        per_step_after += spike_mean
        method += (f"; the {s.data_wait_spike_steps} step(s) that waited far longer than the typical one keep "
                   f"their extra {s.data_wait_spike_s:.2f} s")
    saved = max(step_mean - per_step_after, 0.0)
    gain = gain_from_seconds(facts, saved * n_steps, method)
    # With workers the wait has two parts, and each fix reaches one: more workers the part spent waiting for
    # them (not the training thread's CPU in the hand-over), a cheaper hand-over that CPU and the blocking
    # around it. High needs the part its fix reaches to be measured at ≥ 20 % of the step: the workers' part
    # for input.io; for input.handover the training thread's CPU in it, the one part a clock proved.
    proven = {"input.io": wait_mean - handover_mean, "input.handover": handover_mean}.get(kind or "")
    if proven is not None and handover_mean > 0 and severity == "high" and proven < HIGH * step_mean:
        severity = "moderate"
    if foreign is not None and starved:
        summary += (f" Other processes used {foreign:.1f} cores meanwhile and the loading waited for a CPU: it is "
                    "CPU work their load starved, so it is slower here than on a quiet host.")
    elif foreign is not None:
        # the CPU-or-latency split reads CPU shares, which processes outside the job distort: a CPU-bound
        # worker that gets no core looks like one waiting on storage
        summary += (f" Other processes used {foreign:.1f} cores meanwhile, so whether the loading is CPU work "
                    "or latency is uncertain here: measure it again on a quiet host.")
    return [
        Finding(
            cause=kind,
            severity=severity,
            title=title,
            summary=summary,
            evidence=evidence,
            fix="\n".join(fix_lines),
            estimated_gain=gain,
            # a hand-over's cost depends on the host's scheduling of the worker's side of it: measured ×1.02-1.22
            # from the same fix on one host, so the split is sure but not how much of it a fix returns
            # still loader-bound: the cause is sure, the gain an upper bound of loading made cheaper (how cheap is
            # the user's to choose)
            confidence="low" if foreign is not None else "medium" if still_loader_bound else "high"
            if s.steps >= 10 and kind != "input.handover" else "medium",
        )
    ]
