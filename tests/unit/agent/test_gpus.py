"""GPU discovery never breaks an agent start."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from hal.agent.config import AgentConfig
from hal.agent.gpus import GpuInventory, configured_gpus, discover_gpus, inventory_from_nvml
from hal.core.errors import InvalidRequest
from hal.testing.nvlink import BRIDGED_PAIRS_4, NVSWITCH_8, RecordedNvml, matrix


def test_without_pynvml_there_are_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    assert discover_gpus() == GpuInventory(0, "")


def test_a_broken_nvml_means_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    class BrokenNvml:
        @staticmethod
        def nvmlInit() -> None:
            raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", BrokenNvml)
    assert discover_gpus() == GpuInventory(0, "")


@pytest.mark.gpu
@pytest.mark.skipif(
    importlib.util.find_spec("pynvml") is None or shutil.which("nvidia-smi") is None,
    reason="needs nvidia-ml-py (pynvml) and an NVIDIA driver with at least one GPU",
)
def test_nvml_finds_the_gpus() -> None:
    inventory = discover_gpus()
    assert inventory.count >= 1
    assert inventory.model


def test_nvml_inventory_carries_the_nvlink_islands() -> None:
    paired = inventory_from_nvml(RecordedNvml("NVIDIA RTX A6000", matrix(BRIDGED_PAIRS_4)))
    assert paired == GpuInventory(4, "NVIDIA RTX A6000", ((0, 2), (1, 3)))
    # one island of all GPUs is reported as () (the default: nothing to tell apart)
    switched = inventory_from_nvml(RecordedNvml("NVIDIA H100 80GB HBM3", matrix(NVSWITCH_8)))
    assert switched == GpuInventory(8, "NVIDIA H100 80GB HBM3", ())


def test_a_driver_without_nvlink_status_still_counts_the_gpus() -> None:
    class NoP2P(RecordedNvml):
        def nvmlDeviceGetP2PStatus(self, a: int, b: int, index: int) -> int:
            raise RuntimeError("Not Supported")

    inventory = inventory_from_nvml(NoP2P("Tesla T4", [["X", "NS"], ["NS", "X"]]))
    assert inventory == GpuInventory(2, "Tesla T4", ())


def test_configured_islands_override_and_are_checked(tmp_path: Path) -> None:
    config = AgentConfig(gpus=8, gpu_islands=((0, 1, 2, 3), (4, 5, 6, 7)), state_dir=tmp_path)
    assert configured_gpus(config).islands == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert configured_gpus(AgentConfig(gpus=2, state_dir=tmp_path)).islands == ()
    with pytest.raises(InvalidRequest, match="has 2 GPU"):
        configured_gpus(AgentConfig(gpus=2, gpu_islands=((0, 1, 2),), state_dir=tmp_path))
