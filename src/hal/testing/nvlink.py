"""NVLink peer-status matrices of a few node kinds, in ``nvidia-smi topo -p2p n``'s
format, and ``RecordedNvml``, which answers NVML's calls from one: the discovery logic
of ``hal.agent.gpus`` is tested on them where no GPU is present."""

from __future__ import annotations

import ctypes
from typing import Any

# NVLink peer status (`nvidia-smi topo -p2p n`) of three node kinds. OK: a direct NVLink
# path (or one through an NVSwitch); NS: not supported (PCIe only).
NVSWITCH_8 = """\
      GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7
GPU0  X    OK   OK   OK   OK   OK   OK   OK
GPU1  OK   X    OK   OK   OK   OK   OK   OK
GPU2  OK   OK   X    OK   OK   OK   OK   OK
GPU3  OK   OK   OK   X    OK   OK   OK   OK
GPU4  OK   OK   OK   OK   X    OK   OK   OK
GPU5  OK   OK   OK   OK   OK   X    OK   OK
GPU6  OK   OK   OK   OK   OK   OK   X    OK
GPU7  OK   OK   OK   OK   OK   OK   OK   X
"""
# Two NVLink bridges pairing GPUs across PCIe slots: 0-2 and 1-3.
BRIDGED_PAIRS_4 = """\
      GPU0 GPU1 GPU2 GPU3
GPU0  X    NS   OK   NS
GPU1  NS   X    NS   OK
GPU2  OK   NS   X    NS
GPU3  NS   OK   NS   X
"""
# A DGX-1-style hybrid cube mesh: two quads linked to each other pairwise, so every
# GPU reaches every other over NVLink hops: one island.
CUBE_MESH_8 = """\
      GPU0 GPU1 GPU2 GPU3 GPU4 GPU5 GPU6 GPU7
GPU0  X    OK   OK   OK   OK   NS   NS   NS
GPU1  OK   X    OK   OK   NS   OK   NS   NS
GPU2  OK   OK   X    OK   NS   NS   OK   NS
GPU3  OK   OK   OK   X    NS   NS   NS   OK
GPU4  OK   NS   NS   NS   X    OK   OK   OK
GPU5  NS   OK   NS   NS   OK   X    OK   OK
GPU6  NS   NS   OK   NS   OK   OK   X    OK
GPU7  NS   NS   NS   OK   OK   OK   OK   X
"""
PCIE_ONLY_2 = """\
      GPU0 GPU1
GPU0  X    NS
GPU1  NS   X
"""


def matrix(text: str) -> list[list[str]]:
    """The status cells of a matrix, row by row (``X`` on the diagonal)."""
    return [line.split()[1:] for line in text.splitlines()[1:]]


class GpuFabricInfo(ctypes.Structure):
    """``pynvml.c_nvmlGpuFabricInfo_t``'s layout (NVML's ``nvmlGpuFabricInfo_t``)."""

    _fields_ = [
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
    ]


class RecordedNvml:
    """Replays what NVML answered on a node: the GPU names, the NVLink peer status
    (``nvidia-smi topo -p2p n``'s matrix, OK where two GPUs are NVLink peers) and, for
    GPUs in a multi-node NVLink domain, the fabric info per GPU: ``fabric[i]`` is
    ``(cluster uuid bytes, clique id, state)``; ``fabric=None``: NotSupported."""

    NVML_P2P_CAPS_INDEX_NVLINK = 2
    NVML_P2P_STATUS_OK = 0
    NVML_P2P_STATUS_NOT_SUPPORTED = 5
    NVML_SUCCESS = 0
    NVML_GPU_FABRIC_STATE_IN_PROGRESS = 2
    NVML_GPU_FABRIC_STATE_COMPLETED = 3
    c_nvmlGpuFabricInfo_t = GpuFabricInfo

    def __init__(
        self,
        name: str,
        matrix: list[list[str]],
        fabric: list[tuple[bytes, int, int]] | None = None,
    ) -> None:
        self.name, self.matrix, self.fabric = name, matrix, fabric

    def nvmlDeviceGetGpuFabricInfo(self, handle: int, ref: Any) -> int:
        if self.fabric is None:
            raise RuntimeError("Not Supported")  # pynvml raises NVMLError_NotSupported
        cluster, clique, state = self.fabric[handle]
        info: GpuFabricInfo = ref._obj  # what ctypes.byref points at
        info.clusterUuid[:] = list(cluster)
        info.status, info.cliqueId, info.state = self.NVML_SUCCESS, clique, state
        return self.NVML_SUCCESS

    def nvmlDeviceGetCount(self) -> int:
        return len(self.matrix)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self.name.encode()

    def nvmlDeviceGetP2PStatus(self, a: int, b: int, index: int) -> int:
        assert index == self.NVML_P2P_CAPS_INDEX_NVLINK
        ok = self.matrix[a][b] == "OK"
        return self.NVML_P2P_STATUS_OK if ok else self.NVML_P2P_STATUS_NOT_SUPPORTED
