"""NVML's vocabulary as the sampler uses it: the field ids and GPM metric ids it reads into ``gpu`` columns, the
return codes after which a call never succeeds, the numbering of MIG instances, and nvmlInit's failures in words.

Literal values (from nvidia-ml-py), so that an old pynvml lacking a name still works.
"""

from __future__ import annotations

from typing import Any

# column → NVML field id (values from nvidia-ml-py; literal so that an old pynvml lacking a name still works)
FIELDS: dict[str, int] = {
    "energy_mj": 83,  # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ since driver load (Volta+)
    "power_instant_mw": 186,  # NVML_FI_DEV_POWER_INSTANT, mW, not averaged
    "throttle_power_ns": 74,  # NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP (cumulative ns)
    "throttle_sync_boost_ns": 76,  # …_SYNC_BOOST
    "throttle_thermal_ns": 269,  # …_SW_THERM_SLOWDOWN (NVML 12.9 / driver R575 and newer)
    "throttle_thermal_policy_ns": 75,  # NVML_FI_DEV_PERF_POLICY_THERMAL: on every driver (R535–R570 lack 269)
    "throttle_hw_thermal_ns": 270,  # …_HW_THERM_SLOWDOWN
    "throttle_hw_power_brake_ns": 271,  # …_HW_POWER_BRAKE_SLOWDOWN
    "pcie_tx_bytes": 197,  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES (cumulative, may wrap; NVML 12.5 / R555+)
    "pcie_rx_bytes": 198,  # NVML_FI_DEV_PCIE_COUNT_RX_BYTES
}

# column → GPM metric id (NVML_GPM_METRIC_*)
GPM_METRICS: dict[str, int] = {
    "sm_active": 2,  # SM_UTIL
    "sm_occupancy": 3,  # SM_OCCUPANCY
    "tensor_active": 5,  # ANY_TENSOR_UTIL
    "dram_active": 10,  # DRAM_BW_UTIL
}

# nvmlValueType_t → member of the c_nvmlValue_t union
VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}

# NVML return codes after which a call will never succeed on this device. INVALID_ARGUMENT is what an older
# driver answers for a field id it does not know (269–271 before R575, 197/198 before R555), and what a MIG
# instance answers for whole-GPU queries: as permanent as NOT_SUPPORTED.
_INVALID_ARGUMENT, _NOT_SUPPORTED, _NO_PERMISSION, _NOT_FOUND, _FUNCTION_NOT_FOUND, GPU_IS_LOST = 2, 3, 4, 6, 13, 15
PERMANENT = {_INVALID_ARGUMENT, _NOT_SUPPORTED, _NO_PERMISSION, _FUNCTION_NOT_FOUND}
RETURN_NAMES = {1: "Uninitialized", 2: "InvalidArgument", 3: "NotSupported", 4: "NoPermission", 6: "NotFound",
                 13: "FunctionNotFound", 15: "GpuIsLost", 999: "Unknown"}

#: NVML index of a MIG instance: (parent index + 1) × MIG_INDEX_BASE + the instance's slot (GPU 0's slot 2 is
#: 1002), so whole GPUs keep their NVML indices and every instance has a stable, distinct number
MIG_INDEX_BASE = 1000


def mig_index(parent: int, slot: int) -> int:
    return (parent + 1) * MIG_INDEX_BASE + slot


def text(v: Any) -> str:
    """An NVML string as text (older nvidia-ml-py answers bytes)."""
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


def init_reason(e: Exception) -> str:
    """A one-line reason for the run's notes, from the nvmlInit error."""
    code = getattr(e, "value", None)
    if code == 12:  # NVML_ERROR_LIBRARY_NOT_FOUND
        return "no NVIDIA driver (libnvidia-ml.so.1 not found)"
    if code == 9:  # NVML_ERROR_DRIVER_NOT_LOADED
        return "NVIDIA driver not loaded"
    if code == 18:  # NVML_ERROR_LIB_RM_VERSION_MISMATCH
        return "NVIDIA driver/library version mismatch (reboot or reload the driver)"
    return f"NVML could not start: {e}"
