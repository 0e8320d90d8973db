"""What jobs' processes do with the GPUs, through NVML, for ``sstat`` and ``sacct``
(Slurm's ``gres/gpumem`` and ``gres/gpuutil`` in ``TRESUsageInMax``/``TRESUsageInAve``).

As Slurm's ``gpu/nvml`` plugin does, use is read per process and summed over the GPUs:
the memory each process holds (``nvmlDeviceGetComputeRunningProcesses``'
``usedGpuMemory``) and its streaming-multiprocessor utilisation (``smUtil`` of
``nvmlDeviceGetProcessUtilization``, the newest sample since the last read). A job's use
is that of the processes in its tree, so two busy GPUs read ``gpuutil=200``, and so is
a job step task's (``srun``'s, through the step keeper: the task and the processes below
it) where its step was given GPUs on the node; one read serves both. NVML names
processes by the pid it sees: an agent in another pid namespace than its jobs' (a
container on a host driver) attributes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hal.agent import gpuhealth
from hal.wire.jobs import GpuUsage

log = logging.getLogger("hal.agent")


@dataclass(frozen=True, slots=True)
class DeviceGpu:
    """One GPU as a whole: the percent of the last sample period a kernel ran, and its
    memory in use (every process's and the driver's) and in all."""

    index: int
    util: int
    mem_used_bytes: int
    mem_total_bytes: int


@dataclass(frozen=True, slots=True)
class ProcessGpu:
    """One process's use of the GPUs, summed over them."""

    mem_bytes: int = 0
    util: int = 0  # percent of one GPU's SMs, summed over GPUs


class GpuSampler:
    """Reads per-process GPU use; holds NVML open from ``open`` to ``close``."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles
        self._seen = [0] * len(handles)  # per GPU: newest utilisation sample read (µs)

    @classmethod
    def open(cls) -> GpuSampler | None:
        """A sampler over this node's GPUs, or None without NVML or GPUs."""
        try:
            import pynvml  # type: ignore[import-not-found, unused-ignore]

            nvml: Any = pynvml
            nvml.nvmlInit()
        except Exception as err:  # no package, library or driver
            log.info("GPU usage not sampled: NVML unavailable (%s)", err)
            return None
        try:
            count = int(nvml.nvmlDeviceGetCount())
            handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as err:
            log.warning("GPU usage not sampled: NVML failed listing GPUs (%s)", err)
            handles = []
        if not handles:
            nvml.nvmlShutdown()
            return None
        return cls(nvml, handles)

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            log.debug("nvmlShutdown failed", exc_info=True)

    def health(self) -> list[str]:
        """The GPUs' problems now (``gpuhealth``); the count found at start expected."""
        return gpuhealth.problems(self._nvml, self._handles, len(self._handles))

    def devices(self) -> list[DeviceGpu]:
        """Each GPU's utilisation and memory now, as the device reports them (all its
        processes, HAL's jobs or not): the agent's ``/metrics``. A GPU that does not
        answer is left out."""
        found: list[DeviceGpu] = []
        for index, handle in enumerate(self._handles):
            try:
                memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
                util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
                found.append(DeviceGpu(index, int(util.gpu), int(memory.used), int(memory.total)))
            except Exception as err:
                log.debug("NVML device read of GPU %d: %s", index, err)
        return found

    def sample(self) -> dict[int, ProcessGpu]:
        """Every process on a GPU now: pid → its memory and utilisation over all GPUs."""
        memory: dict[int, int] = {}
        util: dict[int, int] = {}
        for index, handle in enumerate(self._handles):
            for pid, used in self._memory(handle):
                memory[pid] = memory.get(pid, 0) + used
            for pid, sm in self._utilisation(index, handle).items():
                util[pid] = util.get(pid, 0) + sm
        return {
            pid: ProcessGpu(memory.get(pid, 0), util.get(pid, 0)) for pid in memory.keys() | util
        }

    def _memory(self, handle: Any) -> list[tuple[int, int]]:
        try:
            procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except Exception as err:
            log.debug("NVML process list failed (%s)", err)
            return []
        # usedGpuMemory is None where the driver cannot say (NVML_VALUE_NOT_AVAILABLE)
        return [(int(p.pid), int(p.usedGpuMemory or 0)) for p in procs]

    def _utilisation(self, index: int, handle: Any) -> dict[int, int]:
        """pid → smUtil of its newest sample since the last read of this GPU."""
        since = self._seen[index] or int((time.time() - 10) * 1e6)
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(handle, since)
        except Exception as err:  # NVMLError_NotFound: no process ran a kernel since
            log.debug("NVML process utilisation: %s", err)
            return {}
        newest: dict[int, tuple[int, int]] = {}
        for s in samples:
            stamp = int(s.timeStamp)
            if stamp > newest.get(int(s.pid), (-1, 0))[0]:
                newest[int(s.pid)] = (stamp, int(s.smUtil))
            self._seen[index] = max(self._seen[index], stamp)
        return {pid: sm for pid, (_, sm) in newest.items()}


def use_of(pids: Iterable[int], sample: dict[int, ProcessGpu]) -> ProcessGpu:
    """The use of a process tree: its processes' summed."""
    found = [sample[pid] for pid in pids if pid in sample]
    return ProcessGpu(sum(p.mem_bytes for p in found), sum(p.util for p in found))


@dataclass(slots=True)
class GpuTally:
    """One job's samples so far: the latest, the most, and the mean utilisation."""

    now: ProcessGpu = ProcessGpu()
    max_mem_bytes: int = 0
    max_util: int = 0
    util_total: int = 0
    samples: int = 0

    def add(self, use: ProcessGpu) -> None:
        self.now = use
        self.max_mem_bytes = max(self.max_mem_bytes, use.mem_bytes)
        self.max_util = max(self.max_util, use.util)
        self.util_total += use.util
        self.samples += 1

    def usage(self) -> GpuUsage:
        return GpuUsage(
            mem_bytes=self.now.mem_bytes,
            max_mem_bytes=self.max_mem_bytes,
            util=self.now.util,
            max_util=self.max_util,
            ave_util=round(self.util_total / max(self.samples, 1), 1),
        )
