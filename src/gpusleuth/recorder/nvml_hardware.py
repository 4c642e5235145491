"""The static facts of each NVML device, for ``meta.json``: what the card is and what it can do (a MIG instance:
its slices, SMs and memory). Read once per recording through the sampler's ``call`` (each NVML call takes the
driver's lock; a call the device does not support answers None and is switched off for it).
"""

from __future__ import annotations

from typing import Any, Callable

from gpusleuth.recorder.nvml_codes import text as _text
from gpusleuth.recorder.nvml_device import NvmlDevice

Call = Callable[..., Any]  # the sampler's ``_call(device, name, *args)``: the result, or None when it failed


def read_hardware(nv: Any, devices: list[NvmlDevice], call: Call) -> list[dict[str, Any]]:
    """Per device (``devices``, their NVML module ``nv``): name, UUID, PCI bus, memory, power limit, clocks,
    driver and CUDA versions, compute capability, GPM support and MIG mode."""
    sys_dev = devices[0]
    driver = call(sys_dev, "nvmlSystemGetDriverVersion")
    cuda = call(sys_dev, "nvmlSystemGetCudaDriverVersion")
    out = []
    for d in devices:
        if d.parent is not None:
            out.append(mig_hardware(d, driver, cuda, call))
            continue
        h = d.handle
        mem = call(d, "nvmlDeviceGetMemoryInfo", h)
        pci = call(d, "nvmlDeviceGetPciInfo", h)
        limit = call(d, "nvmlDeviceGetEnforcedPowerLimit", h)
        cc = call(d, "nvmlDeviceGetCudaComputeCapability", h)
        mode = call(d, "nvmlDeviceGetMigMode", h)
        name = call(d, "nvmlDeviceGetName", h)
        uuid = call(d, "nvmlDeviceGetUUID", h)
        out.append({
            "index": d.index,
            "name": _text(name) if name is not None else None,
            "uuid": _text(uuid) if uuid is not None else None,
            "pci_bus_id": _text(pci.busId) if pci is not None else None,
            "memory_total": int(mem.total) if mem is not None else None,
            "power_limit_w": limit / 1000.0 if limit is not None else None,
            "max_sm_clock_mhz": call(d, "nvmlDeviceGetMaxClockInfo", h, getattr(nv, "NVML_CLOCK_SM", 1)),
            "max_mem_clock_mhz": call(d, "nvmlDeviceGetMaxClockInfo", h, getattr(nv, "NVML_CLOCK_MEM", 2)),
            "driver_version": _text(driver) if driver is not None else None,
            "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
            "gpm_supported": d.gpm,
            "mig_mode": (bool(mode[0]) if mode is not None else None),
        })
    return out


def mig_hardware(d: NvmlDevice, driver: Any, cuda: Any, call: Call) -> dict[str, Any]:
    """A MIG instance: its own name, UUID, memory, SMs and slices; power and clocks are its GPU's."""
    h = d.handle
    name = call(d, "nvmlDeviceGetName", h)
    uuid = call(d, "nvmlDeviceGetUUID", h)
    mem = call(d, "nvmlDeviceGetMemoryInfo", h)
    attrs = call(d, "nvmlDeviceGetAttributes_v2", h) or call(d, "nvmlDeviceGetAttributes", h)
    return {
        "index": d.index,
        "parent": d.parent,
        "mig": True,
        "name": _text(name) if name is not None else None,
        "uuid": _text(uuid) if uuid is not None else None,
        "memory_total": int(mem.total) if mem is not None else None,
        "sm_count": int(attrs.multiprocessorCount) if attrs is not None else None,
        "gpu_instance_slices": int(attrs.gpuInstanceSliceCount) if attrs is not None else None,
        "compute_instance_slices": int(attrs.computeInstanceSliceCount) if attrs is not None else None,
        "driver_version": _text(driver) if driver is not None else None,
        "cuda_driver_version": f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None,
        "gpm_supported": False,
        "mig_mode": None,
    }
