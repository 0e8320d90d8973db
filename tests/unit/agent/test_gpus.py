"""GPU discovery never breaks an agent start."""

from __future__ import annotations

import importlib.util
import shutil
import sys

import pytest

from hal.agent.gpus import GpuInventory, discover_gpus


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


@pytest.mark.skipif(
    importlib.util.find_spec("pynvml") is None or shutil.which("nvidia-smi") is None,
    reason="needs nvidia-ml-py (pynvml) and an NVIDIA driver with at least one GPU",
)
def test_nvml_finds_the_gpus() -> None:
    inventory = discover_gpus()
    assert inventory.count >= 1
    assert inventory.model
