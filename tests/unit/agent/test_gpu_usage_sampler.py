"""Per-process GPU use through NVML (``hal.agent.gpuusage``): summed over GPUs and over
a job's processes, its peaks and mean kept between samples."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from hal.agent.gpuusage import GpuSampler, GpuTally, ProcessGpu, use_of


@dataclass
class Proc:
    pid: int
    usedGpuMemory: int | None


@dataclass
class Util:
    pid: int
    timeStamp: int
    smUtil: int


class NotFound(Exception):
    """pynvml's NVMLError_NotFound: no utilisation sample since the time asked."""


class TwoGpus:
    """NVML as it answers on a node with two GPUs: per GPU, the processes with their
    memory and the utilisation samples, each with its time in µs."""

    def __init__(self) -> None:
        self.procs: list[list[Proc]] = [[], []]
        self.samples: list[list[Util]] = [[], []]
        self.asked_since: list[int] = []

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Proc]:
        return self.procs[handle]

    def nvmlDeviceGetProcessUtilization(self, handle: int, since: int) -> list[Util]:
        self.asked_since.append(since)
        newer = [s for s in self.samples[handle] if s.timeStamp > since]
        if not newer:
            raise NotFound("Not Found")
        return newer


def test_a_process_on_two_gpus_sums_its_memory_and_utilisation() -> None:
    nvml = TwoGpus()
    nvml.procs = [[Proc(10, 1 << 30), Proc(11, 2 << 30)], [Proc(10, 3 << 30)]]
    now = int(time.time() * 1e6)  # NVML's sample times: µs since the epoch
    nvml.samples = [[Util(10, now - 3, 40), Util(11, now - 2, 90)], [Util(10, now - 1, 60)]]
    sample = GpuSampler(nvml, [0, 1]).sample()
    assert sample == {10: ProcessGpu(4 << 30, 100), 11: ProcessGpu(2 << 30, 90)}


def test_the_newest_utilisation_sample_counts_and_is_not_read_twice() -> None:
    nvml = TwoGpus()
    nvml.procs = [[Proc(10, 1 << 20)], []]
    now = int(time.time() * 1e6)
    old = Util(10, now - 60_000_000, 99)  # a minute ago: before the first read's window
    nvml.samples = [[old, Util(10, now - 2_000_000, 30), Util(10, now - 1_000_000, 80)], []]
    sampler = GpuSampler(nvml, [0, 1])
    assert sampler.sample()[10] == ProcessGpu(1 << 20, 80)
    # the second read asks only for samples after the newest one seen: none yet
    assert sampler.sample()[10] == ProcessGpu(1 << 20, 0)
    assert nvml.asked_since[-2] == now - 1_000_000


def test_memory_the_driver_cannot_tell_counts_as_none() -> None:
    nvml = TwoGpus()
    nvml.procs = [[Proc(10, None)], []]  # NVML_VALUE_NOT_AVAILABLE
    assert GpuSampler(nvml, [0, 1]).sample() == {10: ProcessGpu(0, 0)}


def test_a_failing_gpu_leaves_the_others_read() -> None:
    class Broken(TwoGpus):
        def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Proc]:
            if handle == 0:
                raise RuntimeError("GPU is lost")
            return super().nvmlDeviceGetComputeRunningProcesses(handle)

    nvml = Broken()
    nvml.procs = [[], [Proc(12, 5 << 20)]]
    assert GpuSampler(nvml, [0, 1]).sample() == {12: ProcessGpu(5 << 20, 0)}


def test_a_job_is_its_processes_and_its_tally_keeps_peaks_and_mean() -> None:
    sample = {1: ProcessGpu(100, 50), 2: ProcessGpu(300, 20), 9: ProcessGpu(999, 99)}
    assert use_of([1, 2, 3], sample) == ProcessGpu(400, 70)  # 9 is another job's
    tally = GpuTally()
    for use in (ProcessGpu(400, 70), ProcessGpu(900, 10), ProcessGpu(0, 0)):
        tally.add(use)
    usage = tally.usage()
    assert (usage.mem_bytes, usage.max_mem_bytes) == (0, 900)
    assert (usage.util, usage.max_util, usage.ave_util) == (0, 70, 26.7)


@pytest.mark.gpu
@pytest.mark.skipif(
    shutil.which("nvidia-smi") is None or importlib.util.find_spec("torch") is None,
    reason="needs an NVIDIA GPU with its driver, and PyTorch",
)
def test_a_real_cuda_process_is_seen_with_its_memory_and_work() -> None:
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import torch, time\n"
            "x = torch.randn(4096, 4096, device='cuda')\n"
            "held = torch.empty(1 << 30, dtype=torch.uint8, device='cuda')\n"
            "t = time.time()\n"
            "while time.time() - t < 12: x @ x\n"
            "torch.cuda.synchronize()\n",
        ]
    )
    sampler = GpuSampler.open()
    assert sampler is not None
    try:
        deadline = time.monotonic() + 30
        seen = ProcessGpu()
        while time.monotonic() < deadline and (seen.mem_bytes < 1 << 30 or seen.util == 0):
            time.sleep(1)
            seen = sampler.sample().get(busy.pid, seen)
        assert seen.mem_bytes >= 1 << 30, seen  # the GiB it holds, and its context
        assert seen.util > 0, seen
        assert os.getpid() not in sampler.sample()  # this test holds no CUDA context
    finally:
        sampler.close()
        busy.kill()
        busy.wait()


@pytest.mark.gpu
@pytest.mark.skipif(
    shutil.which("nvidia-smi") is None, reason="needs an NVIDIA GPU with its driver"
)
def test_a_healthy_real_gpu_reads_no_problem_and_its_device_figures() -> None:
    sampler = GpuSampler.open()
    assert sampler is not None
    try:
        assert sampler.health() == []  # ECC, row remapping: read or not supported, all 0
        devices = sampler.devices()
        assert devices and devices[0].index == 0
        assert devices[0].mem_total_bytes >= 8 << 30
        assert 0 <= devices[0].mem_used_bytes <= devices[0].mem_total_bytes
        assert 0 <= devices[0].util <= 100
    finally:
        sampler.close()
