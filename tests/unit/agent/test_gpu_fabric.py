"""Multi-node NVLink domains from NVML's GPU fabric info (GB200 NVL72-style systems):
the agent names its domain "<cluster uuid>/<clique id>" when every GPU reports the same
completed fabric registration, and reports none otherwise."""

from __future__ import annotations

import uuid

from hal.agent.gpus import fabric_domain, inventory_from_nvml
from hal.testing.nvlink import NVSWITCH_8, PCIE_ONLY_2, RecordedNvml, matrix

CLUSTER = uuid.UUID("6f1c2a3b-4d5e-4f60-8a71-92b3c4d5e6f7")
DONE = RecordedNvml.NVML_GPU_FABRIC_STATE_COMPLETED


def _nvml(fabric: list[tuple[bytes, int, int]] | None, text: str = NVSWITCH_8) -> RecordedNvml:
    return RecordedNvml("NVIDIA GB200", matrix(text), fabric)


def test_every_gpu_in_one_clique_names_the_domain() -> None:
    nvml = _nvml([(CLUSTER.bytes, 7, DONE)] * 8)
    inventory = inventory_from_nvml(nvml)
    assert inventory.nvlink_domain == f"{CLUSTER}/7"
    assert inventory.count == 8  # islands and count unchanged by the fabric probe


def test_two_nodes_of_one_domain_agree_and_another_clique_differs() -> None:
    a = fabric_domain(_nvml([(CLUSTER.bytes, 7, DONE)] * 2), [0, 1])
    b = fabric_domain(_nvml([(CLUSTER.bytes, 7, DONE)] * 2), [0, 1])
    c = fabric_domain(_nvml([(CLUSTER.bytes, 8, DONE)] * 2), [0, 1])
    assert a == b != c


def test_no_fabric_support_means_no_domain() -> None:
    assert inventory_from_nvml(_nvml(None, PCIE_ONLY_2)).nvlink_domain == ""


def test_zero_uuid_or_unfinished_registration_means_no_domain() -> None:
    zero = bytes(16)
    assert fabric_domain(_nvml([(zero, 0, DONE)] * 8), list(range(8))) == ""
    busy = RecordedNvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS
    assert fabric_domain(_nvml([(CLUSTER.bytes, 7, busy)] * 8), list(range(8))) == ""


def test_gpus_disagreeing_means_no_domain() -> None:
    fabric = [(CLUSTER.bytes, 7, DONE)] * 7 + [(CLUSTER.bytes, 9, DONE)]
    assert fabric_domain(_nvml(fabric), list(range(8))) == ""
