"""GPU health, as a node health check reads it (Slurm's ``HealthCheckProgram`` with NHC,
or DCGM's health watches): what makes a GPU unfit for new jobs until an operator
resets it. The agent reads it every ``--gpu-health-interval`` seconds through NVML and
sends the problems with its syncs; the control plane drains the node with the first as
its reason, and resumes it once the agent finds none (``state.agents``).

A problem is one of:

- a GPU NVML can no longer reach (``NVML_ERROR_GPU_IS_LOST``: fallen off the bus, XID 79),
  or fewer GPUs than the agent found at start;
- uncorrectable ECC errors since the driver loaded (the volatile count: a reset clears
  it), which corrupt what a job computes;
- a pending or failed row remapping (Ampere and later: the GPU needs a reset to use its
  spare rows), or pending page retirement (older GPUs).

What a GPU does not support (``NVML_ERROR_NOT_SUPPORTED``: no ECC on consumer boards, no
row remapping before Ampere) is no problem, nor is any other failed read (logged).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("hal.agent")

GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST
UNCORRECTED, VOLATILE = 1, 0  # NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC


class _Lost(Exception):
    pass


def problems(nvml: Any, handles: list[Any], expected: int) -> list[str]:
    """Every problem of this node's GPUs now (``[]``: healthy)."""
    found: list[str] = []
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except Exception as err:
        return [f"NVML does not answer ({err})"]
    if count < expected:
        found.append(f"{count} of the {expected} GPUs found at start answer")
    for index, handle in enumerate(handles):
        try:
            found += _gpu(nvml, handle, index)
        except _Lost as err:
            found.append(f"GPU {index} is lost ({err.__cause__})")
    return found


def _gpu(nvml: Any, handle: Any, index: int) -> list[str]:
    found: list[str] = []
    ecc = _read(lambda: nvml.nvmlDeviceGetTotalEccErrors(handle, UNCORRECTED, VOLATILE))
    if ecc:
        found.append(f"GPU {index} has {int(ecc)} uncorrectable ECC errors since the driver loaded")
    rows = _read(lambda: nvml.nvmlDeviceGetRemappedRows(handle))
    if rows is not None:
        _, _, pending, failed = rows
        if failed:
            found.append(f"GPU {index}: row remapping failed")
        elif pending:
            found.append(f"GPU {index}: row remapping pending (reset the GPU)")
    retired = _read(lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
    if retired:
        found.append(f"GPU {index}: page retirement pending (reset the GPU)")
    return found


def _read(call: Callable[[], Any]) -> Any:
    """NVML's answer; None where it has none. Raises ``_Lost`` for a lost GPU."""
    try:
        return call()
    except Exception as err:
        if getattr(err, "value", None) == GPU_IS_LOST:
            raise _Lost from err
        log.debug("NVML health read: %s", err)  # NotSupported, mostly
        return None
