"""Which of the sampled GPUs were the job's, and how that was decided.

The recorder samples every GPU (and MIG instance) of the node, but energy, cost, MFU and the per-GPU rules
are about the job: a job on GPU 1 of an 8-GPU node must not be charged for the other seven, nor judged
"idle" by them. Evidence, strongest first:

1. NVML's process list: a GPU on which one of the job's processes held memory. The job's PIDs are the
   recorder's process tree, the hook's own PIDs, and both names of each process where the recorder saw a
   PID namespace (``NSpid`` in ``/proc/PID/status``: a job in a container has one PID inside, another
   outside, and NVML reports the outer one).
2. The devices the hook saw the job's memory on, by UUID (``cuda_device`` facts; NVML names GPUs and MIG
   instances by the same UUIDs).
3. The job's ``CUDA_VISIBLE_DEVICES`` (UUIDs, or indices — which follow NVML's order only when
   ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or the GPUs are all of one model, as CUDA then orders them by bus too).

With none of these the job's GPUs cannot be told: all sampled GPUs are counted, and the report says so.
A GPU log read alone (nvidia-smi, DCGM) has no job: all its GPUs are reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpusleuth.run.model import Run
from gpusleuth.run.records import GpuHardware


@dataclass
class JobGpus:
    indices: list[int]  # GPU / MIG-instance indices (as in the gpu table) that were the job's
    how: str  # the evidence, as a sentence
    sampled: list[int] = field(default_factory=list)  # every index the recorder sampled
    decided: bool = True  # False: the job's GPUs could not be told, all sampled ones are counted

    @property
    def others(self) -> list[int]:
        return [i for i in self.sampled if i not in self.indices]


def _norm_uuid(u: object) -> str:
    s = str(u or "").strip().lower()
    for prefix in ("gpu-", "mig-"):
        if s.startswith(prefix):
            s = s[len(prefix):]
    return s


def _label(indices: list[int], hw: dict[int, GpuHardware]) -> str:
    return ", ".join(str(hw.get(i, {}).get("name") or f"GPU {i}") + f" (#{i})" for i in indices)


def job_gpus(run: Run, hardware: list[GpuHardware], sampled: list[int]) -> JobGpus:
    """The job's GPUs among ``sampled`` (indices in the gpu table), from ``hardware`` (the recorder's
    per-device facts: index, uuid, name, parent for MIG instances)."""
    hw = {int(h.get("index", i)): h for i, h in enumerate(hardware)}
    sampled = sorted(sampled)
    if not sampled:
        return JobGpus([], "no GPU was sampled", [], True)
    if run.meta.get("source", "recorder") != "recorder":
        return JobGpus(sampled, "a GPU log read alone: all its GPUs are reported", sampled, True)

    # 1. NVML's process list against the job's PIDs (both sides of a PID namespace)
    pids = {int(p) for p in run.processes}
    procs = run.procs
    if len(procs):
        pids |= {int(p) for p in procs["pid"]}
        if "nspid" in procs:
            ns = np.asarray(procs["nspid"], dtype=np.float64)  # nulls read as NaN
            pids |= {int(p) for p in ns[np.isfinite(ns) & (ns > 0)]}
    gp = run.gpu_procs
    if len(gp) and pids:
        used = sorted({int(g) for g, pid in zip(gp["gpu"], gp["pid"]) if int(pid) in pids} & set(sampled))
        if used:
            # a whole GPU in MIG mode lists no processes of its own: its instances do
            return JobGpus(used, f"NVML's process list: the job's processes held memory on {_label(used, hw)}",
                           sampled)

    # 2. the devices the hook saw the job's memory on, by UUID
    by_uuid = {_norm_uuid(h.get("uuid")): i for i, h in hw.items() if h.get("uuid")}
    seen = [_norm_uuid(i.get("uuid")) for i in run.infos if i.get("kind") == "cuda_device" and i.get("uuid")]
    hooked = sorted({by_uuid[u] for u in seen if u in by_uuid} & set(sampled))
    if hooked:
        return JobGpus(hooked, f"the job's CUDA devices (by UUID, as the hook saw them): {_label(hooked, hw)}",
                       sampled)

    # 3. CUDA_VISIBLE_DEVICES as the job was started with it
    env = run.meta.get("env") or {}
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and str(cvd).strip() not in ("", "all"):
        chosen = _visible(str(cvd), hw, sampled, env)
        if chosen is not None:
            return JobGpus(chosen, f"CUDA_VISIBLE_DEVICES={cvd}: {_label(chosen, hw)}", sampled)

    why = []
    if len(gp):
        why.append("none of the job's PIDs is in NVML's process list (inside a container NVML reports the "
                   "host's PIDs)")
    else:
        why.append("no NVML process list was recorded")
    why.append("no CUDA_VISIBLE_DEVICES")
    return JobGpus(sampled, "could not tell which GPUs were the job's (" + "; ".join(why) + "): all "
                   f"{len(sampled)} sampled GPU(s) are counted", sampled, decided=False)


def _visible(cvd: str, hw: dict[int, GpuHardware], sampled: list[int], env: dict[str, str]) -> list[int] | None:
    """NVML indices named by CUDA_VISIBLE_DEVICES (UUIDs, MIG UUIDs, or integer indices)."""
    by_uuid = {_norm_uuid(h.get("uuid")): i for i, h in hw.items() if h.get("uuid")}
    whole = [i for i in sampled if hw.get(i, {}).get("parent") is None]
    names = {hw.get(i, {}).get("name") for i in whole}
    out: list[int] = []
    for tok in (t.strip() for t in cvd.split(",")):
        if not tok:
            continue
        if tok.lstrip("-").isdigit():
            k = int(tok)
            if k < 0:
                break  # CUDA stops at the first invalid entry
            if env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID" and len(names) > 1:
                return None  # FASTEST_FIRST over mixed models: CUDA's order is not NVML's
            if k in whole:
                out.append(k)
            continue
        u = _norm_uuid(tok)
        match = [i for key, i in by_uuid.items() if key == u or (len(u) >= 8 and key.startswith(u))]
        if not match:
            break
        out.append(match[0])
    out = sorted(set(out) & set(sampled))
    return out or None
