"""A stand-in for nvidia-ml-py's ``pynvml``, for live tests on machines without a GPU.

Put this folder first on an agent's ``PYTHONPATH`` and the agent's real NVML code
(``hal.agent.gpus``, ``hal.agent.gpuusage``) finds ``HAL_TEST_NVML_GPUS`` GPUs (default
1) named "NVIDIA H200". A process "uses" a GPU when its environment says so:
``HAL_TEST_GPU_USE=<memory bytes>:<SM utilisation %>`` puts it on the first GPU of its
``CUDA_VISIBLE_DEVICES`` with that memory and utilisation, as NVML's process lists would
show a CUDA program. Health comes from the JSON file ``HAL_TEST_NVML_HEALTH`` names, read
at every call: ``{"ecc": {"0": 2}, "remap_pending": [1], "lost": [1]}`` (uncorrectable
ECC errors, a pending row remap, a GPU fallen off the bus); no file, healthy. GPU ``i``'s
device file is ``/dev/nvidia<minor>`` with the minor ``HAL_TEST_NVML_MINORS`` gives
(``"4,5"``: GPU 0 is minor 4); unset, NVML answers "Not Supported" and the agent isolates
no devices. The calls and attributes are those HAL uses, with pynvml's names.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0
NVML_SUCCESS = 0
NVML_GPU_FABRIC_STATE_COMPLETED = 3


class NVMLError(Exception):
    def __init__(self, value: int, text: str) -> None:
        super().__init__(text)
        self.value = value  # pynvml's error code


NOT_SUPPORTED, GPU_IS_LOST = 3, 15


def _health() -> dict:
    path = os.environ.get("HAL_TEST_NVML_HEALTH", "")
    try:
        with open(path) as f:
            return dict(json.load(f))
    except (OSError, ValueError):
        return {}


def _answering(handle: int) -> dict:
    health = _health()
    if handle in list(health.get("lost", [])):
        raise NVMLError(GPU_IS_LOST, "GPU is lost")
    return health


class c_nvmlGpuFabricInfo_t:
    pass


@dataclass
class _Process:
    pid: int
    usedGpuMemory: int


@dataclass
class _UtilSample:
    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int = 0


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return int(os.environ.get("HAL_TEST_NVML_GPUS", "1"))


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    return index


def nvmlDeviceGetName(handle: int) -> str:
    return "NVIDIA H200"


def nvmlDeviceGetMinorNumber(handle: int) -> int:
    minors = os.environ.get("HAL_TEST_NVML_MINORS", "")
    if not minors:
        raise NVMLError(NOT_SUPPORTED, "Not Supported")
    return int(minors.split(",")[handle])


def nvmlDeviceGetP2PStatus(a: int, b: int, index: int) -> int:
    return NVML_P2P_STATUS_OK  # one NVLink island


def nvmlDeviceGetGpuFabricInfo(handle: int, ref: object) -> int:
    raise NVMLError(NOT_SUPPORTED, "Not Supported")  # no multi-node NVLink, as an H200


def nvmlDeviceGetTotalEccErrors(handle: int, error_type: int, counter_type: int) -> int:
    ecc = _answering(handle).get("ecc", {})
    return int(ecc.get(str(handle), 0))


def nvmlDeviceGetRemappedRows(handle: int) -> tuple[int, int, int, int]:
    pending = handle in list(_answering(handle).get("remap_pending", []))
    return (0, 0, int(pending), 0)


def nvmlDeviceGetRetiredPagesPendingStatus(handle: int) -> int:
    raise NVMLError(NOT_SUPPORTED, "Not Supported")  # Ampere and later remap rows instead


@dataclass
class _Memory:
    used: int
    total: int


@dataclass
class _Rates:
    gpu: int
    memory: int = 0


def nvmlDeviceGetMemoryInfo(handle: int) -> _Memory:
    _answering(handle)
    return _Memory(sum(memory for _, memory, _ in _users(handle)), 141 << 30)


def nvmlDeviceGetUtilizationRates(handle: int) -> _Rates:
    _answering(handle)
    return _Rates(max((util for _, _, util in _users(handle)), default=0))


def _users(handle: int) -> list[tuple[int, int, int]]:
    """(pid, memory, utilisation) of the processes on GPU ``handle``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except OSError:
            continue
        use = env.get(b"HAL_TEST_GPU_USE")
        visible = env.get(b"CUDA_VISIBLE_DEVICES", b"").split(b",")[0]
        if use and visible.isdigit() and int(visible) == handle:
            memory, util = use.split(b":")
            found.append((int(name), int(memory), int(util)))
    return found


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[_Process]:
    return [_Process(pid, memory) for pid, memory, _ in _users(handle)]


def nvmlDeviceGetProcessUtilization(handle: int, since: int) -> list[_UtilSample]:
    now = int(time.time() * 1e6)
    samples = [_UtilSample(pid, now, util) for pid, _, util in _users(handle)]
    if not samples:
        raise NVMLError(6, "Not Found")  # pynvml's NVMLError_NotFound: no sample since
    return samples
