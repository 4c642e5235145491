"""The typed records a Run carries from its sources: a device's and the host's hardware as their source described
them (``meta.json``'s ``recorder`` part, or an imported log's device fields) and a DataLoader's configuration as the
hook saw it (an ``I`` record). Each is untrusted JSON: :func:`checked` holds a record to its declared field types
(a value of the wrong type is dropped), so what the analysis reads has the type written here.

A leaf module (it imports nothing of gpusleuth): run/meta.py, the sources that build these records and the
analysis that reads them all import it, and no import cycle can pass through it."""

from __future__ import annotations

import types
from typing import Mapping, TypedDict, Union, cast, get_args, get_origin, get_type_hints

#: a JSON scalar: what a hardware description may hold (run/meta.check_meta drops anything else)
Scalar = str | int | float | bool | None


class GpuHardware(TypedDict, total=False):
    """One device as its source described it: the recorder's NVML facts (recorder/nvml.py), an nvidia-smi log's
    device fields (sources/nvsmi.py), a DCGM/Prometheus scrape's labels (sources/prometheus.py). Every field may
    be absent; a source may add fields of its own (plain scalars, shown in the JSON report as they are)."""

    index: int  # NVML's index: the ``gpu`` column of the samples
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    memory_total: int | None  # bytes (NVML)
    mem_total_mib: float | None  # MiB (nvidia-smi's memory.total)
    power_limit_w: float | None  # the enforced power limit
    max_sm_clock_mhz: float | None
    max_mem_clock_mhz: float | None
    max_graphics_clock_mhz: float | None
    driver_version: str | None
    cuda_driver_version: str | None
    compute_capability: str | None  # "9.0"
    gpm_supported: bool | None
    mig_mode: bool | None  # a whole GPU with MIG enabled
    # a MIG instance: its parent GPU's index and its share of the GPU
    mig: bool | None
    parent: int | None
    sm_count: int | None
    gpu_instance_slices: int | None
    compute_instance_slices: int | None
    host: str | None  # a Prometheus scrape's host label
    node: str | None  # a job read from several run directories: which one (sources/jobdirs.py)


class HostHardware(TypedDict, total=False):
    """The host as the recorder described it (recorder/host.py ``HostSampler.hardware``)."""

    cpu_model: str | None
    logical_cores: int | None
    physical_cores: int | None
    cpu_affinity_cores: int | None  # CPUs the job may run on (sched_getaffinity)
    mem_total: int | None  # bytes
    cgroup_version: int | None
    cgroup_cpu_limit_cores: float | None  # the cgroup's cpu.max, in cores
    cgroup_mem_limit: int | None  # bytes
    os: str | None
    kernel: str | None
    platform: str | None
    python: str | None


class LoaderConfig(TypedDict, total=False):
    """One DataLoader as the hook saw it (``hook/_gpusleuth_torch._loader_fact``, an ``I`` line of kind
    ``dataloader``; the reader adds the process and the time)."""

    kind: str  # "dataloader"
    pid: int
    t_ns: int
    num_workers: int | None
    batch_size: int | None
    pin_memory: bool | None
    persistent_workers: bool | None
    prefetch_factor: int | None
    drop_last: bool | None
    dataset: str | None  # the dataset's class name
    torch_threads: int | None  # torch.get_num_threads() of the process when its loader started
    dataset_len: int | None  # samples per epoch (map-style datasets)


def _accepted(hint: object) -> tuple[set[type], bool]:
    """The types a field's annotation accepts, and whether it accepts None."""
    args = get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)
    kinds = {a for a in args if isinstance(a, type) and a is not type(None)}
    return kinds, type(None) in args


def _fits(v: object, kinds: set[type]) -> bool:
    if isinstance(v, bool):  # a bool is an int to isinstance, not to a record
        return bool in kinds
    if isinstance(v, int):
        return int in kinds or float in kinds  # an int where a float is declared, as the type checker allows
    return any(isinstance(v, k) for k in kinds)


def wrong_fields(rec: Mapping[str, object], shape: type) -> dict[str, bool]:
    """The declared fields of ``shape`` (a TypedDict) whose value in ``rec`` has another type: name → whether the
    field may be None (else the field must go)."""
    out = {}
    for name, hint in get_type_hints(shape).items():
        if name not in rec:
            continue
        kinds, nullable = _accepted(hint)
        v = rec[name]
        if not ((v is None and nullable) or (v is not None and _fits(v, kinds))):
            out[name] = nullable
    return out


def checked(rec: Mapping[str, object], shape: type) -> dict[str, object]:
    """A copy of ``rec`` whose declared fields have their declared types: a wrong one is set to None where the
    field allows it, else left out. Undeclared fields are kept as they are."""
    out = dict(rec)
    for name, nullable in wrong_fields(rec, shape).items():
        if nullable:
            out[name] = None
        else:
            del out[name]
    return out


def loader_config(rec: Mapping[str, object]) -> LoaderConfig:
    """The hook's DataLoader record with its fields' types checked."""
    return cast(LoaderConfig, checked(rec, LoaderConfig))


def gpu_hardware(rec: Mapping[str, object]) -> GpuHardware:
    return cast(GpuHardware, checked(rec, GpuHardware))


def host_hardware(rec: Mapping[str, object]) -> HostHardware:
    return cast(HostHardware, checked(rec, HostHardware))
