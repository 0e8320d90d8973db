"""A stand-in for nvidia-ml-py's ``pynvml``, for live tests on machines without a GPU.

Put this folder first on an agent's ``PYTHONPATH`` and the agent's real NVML code
(``hal.agent.gpus``, ``hal.agent.gpuusage``) finds ``HAL_TEST_NVML_GPUS`` GPUs (default
1) named "NVIDIA H200". A process "uses" a GPU when its environment says so:
``HAL_TEST_GPU_USE=<memory bytes>:<SM utilisation %>`` puts it on the first GPU of its
``CUDA_VISIBLE_DEVICES`` with that memory and utilisation, as NVML's process lists would
show a CUDA program. The calls and attributes are those HAL uses, with pynvml's names.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0
NVML_SUCCESS = 0
NVML_GPU_FABRIC_STATE_COMPLETED = 3


class NVMLError(Exception):
    pass


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


def nvmlDeviceGetP2PStatus(a: int, b: int, index: int) -> int:
    return NVML_P2P_STATUS_OK  # one NVLink island


def nvmlDeviceGetGpuFabricInfo(handle: int, ref: object) -> int:
    raise NVMLError("Not Supported")  # no multi-node NVLink, as on an H200 board


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
        raise NVMLError("Not Found")  # pynvml's NVMLError_NotFound: no sample since
    return samples
