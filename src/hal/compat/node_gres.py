"""How a node's GPUs print in Slurm's ``Gres`` and ``GresUsed`` (``sinfo`` and ``scontrol
show node``): ``gpu:4``, or with the type Slurm names an NVML-detected model
``gpu:nvidia_h100_80gb_hbm3:8``; in use, the count and the indices (``gpu:2(IDX:0-1)``,
``gpu:0(IDX:N/A)`` when none is). A node without GPUs has ``(null)``. Also the TRES
strings ``scontrol show node`` prints (``CfgTRES``, ``AllocTRES``)."""

from __future__ import annotations

from hal.compat.formats import memory_mib
from hal.core.node import gpu_type_name
from hal.slurm.syntax import compress_indices

TYPE_CHECKING = False  # (the wire schemas, for annotations: commands read records)
if TYPE_CHECKING:
    from hal.wire.nodes import NodeInfo

NO_GRES = "(null)"


def _gpus(node: NodeInfo, count: int) -> str:
    model = gpu_type_name(node.gpu_model) if node.gpu_model else ""
    return f"gpu:{model}:{count}" if model else f"gpu:{count}"


def gres(node: NodeInfo) -> str:
    """Slurm's ``Gres``: the node's GPUs (``gpu:a100:4``)."""
    return _gpus(node, node.gpus) if node.gpus else NO_GRES


def gres_used(node: NodeInfo) -> str:
    """Slurm's ``GresUsed``: the GPUs in use and their indices (``gpu:a100:2(IDX:0-1)``)."""
    if not node.gpus:
        return NO_GRES
    return f"{_gpus(node, node.gpus_alloc)}(IDX:{compress_indices(node.gpu_ids_alloc) or 'N/A'})"


def tres(cpus: int, memory_bytes: int, gpus: int) -> str:
    """``cpu=2,mem=100M,gres/gpu=1`` as Slurm 22.05.8's node TRES strings: a part that is
    0 is left out (``AllocTRES=cpu=2`` for a job without memory, empty when idle)."""
    parts = [
        f"cpu={cpus}" if cpus else "",
        f"mem={memory_mib(memory_bytes)}" if memory_bytes else "",
        f"gres/gpu={gpus}" if gpus else "",
    ]
    return ",".join(part for part in parts if part)
