"""The GPUs' health read (``hal.agent.gpuhealth``): what drains a node, what does not."""

from __future__ import annotations

from hal.agent.gpuhealth import problems
from hal.agent.gpuusage import DeviceGpu, GpuSampler
from hal.agent.metrics import AgentCollector, AgentCounters, Capacity


class NvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__({3: "Not Supported", 15: "GPU is lost", 999: "Unknown Error"}[value])
        self.value = value


class Board:
    """NVML of a node with ``count`` GPUs, each healthy unless told otherwise."""

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.ecc = [0] * count
        self.rows = [(0, 0, 0, 0)] * count
        self.retired = [0] * count
        self.unsupported: set[str] = set()
        self.lost: set[int] = set()

    def _call(self, name: str, handle: int) -> None:
        if handle in self.lost:
            raise NvmlError(15)
        if name in self.unsupported:
            raise NvmlError(3)

    def nvmlDeviceGetCount(self) -> int:
        return self.count - len(self.lost)

    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:
        assert (kind, counter) == (1, 0)  # uncorrected, volatile (since the driver loaded)
        self._call("ecc", handle)
        return self.ecc[handle]

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        self._call("rows", handle)
        return self.rows[handle]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        self._call("retired", handle)
        return self.retired[handle]


def test_a_healthy_node_has_no_problem_even_where_reads_are_unsupported() -> None:
    board = Board()
    assert problems(board, [0, 1], 2) == []
    board.unsupported = {"ecc", "rows", "retired"}  # a consumer board: no ECC, no remapping
    assert problems(board, [0, 1], 2) == []


def test_ecc_errors_and_row_remaps_are_named_by_gpu() -> None:
    board = Board()
    board.ecc[1] = 3
    board.rows[0] = (5, 1, 1, 0)  # a remap pending
    assert problems(board, [0, 1], 2) == [
        "GPU 0: row remapping pending (reset the GPU)",
        "GPU 1 has 3 uncorrectable ECC errors since the driver loaded",
    ]
    board.rows[0] = (5, 1, 0, 1)  # failed: no spare row left
    board.retired[1] = 1
    assert problems(board, [0, 1], 2) == [
        "GPU 0: row remapping failed",
        "GPU 1 has 3 uncorrectable ECC errors since the driver loaded",
        "GPU 1: page retirement pending (reset the GPU)",
    ]


def test_a_lost_gpu_and_a_silent_driver_are_problems() -> None:
    board = Board()
    board.lost = {1}
    assert problems(board, [0, 1], 2) == [
        "1 of the 2 GPUs found at start answer",
        "GPU 1 is lost (GPU is lost)",
    ]

    class Gone(Board):
        def nvmlDeviceGetCount(self) -> int:
            raise NvmlError(999)

    assert problems(Gone(), [0, 1], 2) == ["NVML does not answer (Unknown Error)"]


def test_other_failed_reads_are_no_problem() -> None:
    class Flaky(Board):
        def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:
            raise NvmlError(999)

    assert problems(Flaky(), [0, 1], 2) == []


def test_the_agent_exports_its_gpus_and_their_health() -> None:
    def text(collector: AgentCollector) -> list[str]:
        return [
            f"{s.name}{sorted(s.labels.items())} {s.value}"
            for family in collector.collect()
            for s in family.samples
            if "gpu" in s.name and s.name != "hal_agent_gpus"
        ]

    counters, capacity = AgentCounters(), Capacity(8, 1 << 30, 1)
    plain = AgentCollector("n1", counters, list, capacity)
    assert text(plain) == []  # a node without NVML GPUs: no GPU families
    devices = [DeviceGpu(0, 97, 7 << 30, 141 << 30)]
    gpu = AgentCollector("g1", counters, list, capacity, lambda: devices, lambda: ["x", "y"])
    memory = "hal_agent_gpu_memory_bytes[('gpu', '0'), ('node', 'g1')"
    assert text(gpu) == [
        "hal_agent_gpu_utilization_percent[('gpu', '0'), ('node', 'g1')] 97",
        f"{memory}, ('state', 'used')] {7 << 30}",
        f"{memory}, ('state', 'total')] {141 << 30}",
        "hal_agent_gpu_problems[('node', 'g1')] 2",
    ]


def test_the_sampler_reads_the_devices_and_leaves_out_one_that_does_not_answer() -> None:
    class Rates:
        gpu = 55

    class Memory:
        used, total = 3 << 30, 80 << 30

    class Devices(Board):
        def nvmlDeviceGetUtilizationRates(self, handle: int) -> Rates:
            self._call("util", handle)
            return Rates()

        def nvmlDeviceGetMemoryInfo(self, handle: int) -> Memory:
            self._call("memory", handle)
            return Memory()

    board = Devices()
    board.lost = {0}
    sampler = GpuSampler(board, [0, 1])
    assert sampler.devices() == [DeviceGpu(1, 55, 3 << 30, 80 << 30)]
    assert sampler.health() == [
        "1 of the 2 GPUs found at start answer",
        "GPU 0 is lost (GPU is lost)",
    ]
