"""GPU discovery through NVML (``nvidia-ml-py``'s ``pynvml``), imported lazily.

No NVML library, no driver, or no GPU all mean the same to the scheduler: 0 GPUs. The
agent must start on every node, so discovery never raises.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("hal.agent")


@dataclass(frozen=True, slots=True)
class GpuInventory:
    count: int = 0
    model: str = ""  # of GPU 0; mixed models on one node are reported by the first


def discover_gpus() -> GpuInventory:
    try:
        import pynvml  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return GpuInventory()
    nvml: Any = pynvml
    try:
        nvml.nvmlInit()
    except Exception as err:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        log.info("NVML unavailable (%s): reporting 0 GPUs", err)
        return GpuInventory()
    try:
        count = int(nvml.nvmlDeviceGetCount())
        model = ""
        if count:
            name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0))
            model = name.decode() if isinstance(name, bytes) else str(name)
        return GpuInventory(count=count, model=model)
    except Exception as err:
        log.warning("NVML failed while listing GPUs (%s): reporting 0 GPUs", err)
        return GpuInventory()
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            log.debug("nvmlShutdown failed", exc_info=True)
