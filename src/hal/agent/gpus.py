"""GPU discovery through NVML (``nvidia-ml-py``'s ``pynvml``), imported lazily.

No NVML library, no driver, or no GPU all mean the same to the scheduler: 0 GPUs. The
agent must start on every node, so discovery never raises.

The NVLink islands come from NVML's peer-to-peer status with the NVLink capability
(``nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK)``, what ``nvidia-smi topo
-p2p n`` prints): GPUs joined by NVLink, directly or through an NVSwitch, are one island
(``hal.core.gpu_islands.islands_from_links``). A failure there keeps the count and
reports no islands (one island of all GPUs).

The multi-node NVLink domain (GB200 NVL72 and the like) comes from NVML's GPU fabric
info (``nvmlDeviceGetGpuFabricInfo``): the NVLink fabric manager gives every GPU of one
domain the same cluster UUID and clique id, so ``"<cluster uuid>/<clique id>"`` names
the domain. No fabric (NotSupported on GPUs without a multi-node NVLink, a zero UUID,
registration not completed) or GPUs that disagree: no domain. ``hal agent
--nvlink-domain`` wins over it.

Each GPU's device minor (``nvmlDeviceGetMinorNumber``: GPU ``i`` is
``/dev/nvidia<minor>``) is what device isolation (``hal.agent.devices``) denies a job
not given that GPU. With ``--gpus N`` there are none, and no GPU is isolated.
"""

from __future__ import annotations

import ctypes
import logging
import uuid
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from hal.core.errors import InvalidRequest
from hal.core.gpu_islands import Islands, complete_islands, islands_from_links

if TYPE_CHECKING:
    from hal.agent.config import AgentConfig

log = logging.getLogger("hal.agent")


@dataclass(frozen=True, slots=True)
class GpuInventory:
    count: int = 0
    model: str = ""  # of GPU 0; mixed models on one node are reported by the first
    islands: Islands = ()  # NVLink islands; () = one island of all GPUs
    nvlink_domain: str = ""  # multi-node NVLink domain from the fabric info; "" = none
    minors: tuple[int, ...] = ()  # GPU i is /dev/nvidia<minors[i]>; () = unknown


def device_choice(config: AgentConfig, gpus: GpuInventory) -> str:
    """``config.constrain_devices``, or "no" where there are no device files to deny.
    Raises ``InvalidRequest`` for ``yes`` with GPUs whose files NVML did not name."""
    if gpus.minors:
        return config.constrain_devices
    if config.constrain_devices == "yes" and gpus.count:
        raise InvalidRequest(
            f"constrain_devices=yes, but NVML named no device files for this node's "
            f"{gpus.count} GPUs (given with --gpus?); use constrain_devices=auto or no",
            field="constrain_devices",
        )
    return "no"


def denied_minors(gpus: GpuInventory, given: list[int]) -> tuple[int, ...]:
    """The device minors of the GPUs a job was not given (device isolation denies them)."""
    return tuple(m for i, m in enumerate(gpus.minors) if i not in given)


def denied_gpus(gpus: GpuInventory, devices: str, given: list[int]) -> tuple[int, ...]:
    """The device minors a job (or its step) given GPUs ``given`` may not open: those of
    ``denied_minors`` where the isolation backend fences devices (``devices``, its
    ``Isolation.devices``), else none."""
    return denied_minors(gpus, given) if devices else ()


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
        return inventory_from_nvml(nvml)
    except Exception as err:
        log.warning("NVML failed while listing GPUs (%s): reporting 0 GPUs", err)
        return GpuInventory()
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            log.debug("nvmlShutdown failed", exc_info=True)


def inventory_from_nvml(nvml: Any) -> GpuInventory:
    """Count, model and NVLink islands from an initialised NVML (``pynvml`` or anything
    with its calls and constants)."""
    count = int(nvml.nvmlDeviceGetCount())
    if not count:
        return GpuInventory()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    name = nvml.nvmlDeviceGetName(handles[0])
    model = name.decode() if isinstance(name, bytes) else str(name)
    return GpuInventory(
        count=count,
        model=model,
        islands=nvlink_islands(nvml, handles),
        nvlink_domain=fabric_domain(nvml, handles),
        minors=device_minors(nvml, handles),
    )


def device_minors(nvml: Any, handles: list[Any]) -> tuple[int, ...]:
    """Each GPU's ``/dev/nvidia<minor>``; () where NVML cannot say (no device isolation)."""
    try:
        return tuple(int(nvml.nvmlDeviceGetMinorNumber(h)) for h in handles)
    except Exception as err:
        log.info("NVML gives no device minor numbers (%s): GPU devices not isolated", err)
        return ()


def fabric_domain(nvml: Any, handles: list[Any]) -> str:
    """``"<cluster uuid>/<clique id>"`` when every GPU reports the same completed NVLink
    fabric registration, else ``""`` (see the module docstring)."""
    found: set[str] = set()
    try:
        for handle in handles:
            info = nvml.c_nvmlGpuFabricInfo_t()
            nvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
            done = info.state == nvml.NVML_GPU_FABRIC_STATE_COMPLETED
            cluster = bytes(info.clusterUuid)
            if not done or info.status != nvml.NVML_SUCCESS or not any(cluster):
                return ""
            found.add(f"{uuid.UUID(bytes=cluster)}/{int(info.cliqueId)}")
    except Exception as err:  # NotSupported: no multi-node NVLink (or an old driver)
        log.info("NVML has no GPU fabric info (%s): no multi-node NVLink domain", err)
        return ""
    if len(found) != 1:
        log.warning("GPUs of this node report different NVLink fabrics %s: none used", found)
        return ""
    return found.pop()


def nvlink_islands(nvml: Any, handles: list[Any]) -> Islands:
    if len(handles) < 2:
        return ()

    def linked(i: int, j: int) -> bool:
        status = nvml.nvmlDeviceGetP2PStatus(
            handles[i], handles[j], nvml.NVML_P2P_CAPS_INDEX_NVLINK
        )
        return bool(status == nvml.NVML_P2P_STATUS_OK)

    try:
        islands = islands_from_links(len(handles), linked)
    except Exception as err:  # NotSupported on old drivers or GPUs without NVLink
        log.info("NVML has no NVLink peer status (%s): one GPU island assumed", err)
        return ()
    return () if len(islands) == 1 else islands


def configured_gpus(config: AgentConfig) -> GpuInventory:
    """The agent's GPUs: ``--gpus`` and ``--gpu-islands`` where given, NVML for the
    rest. Raises ``InvalidRequest`` when the islands do not match the GPU count."""
    found = discover_gpus() if config.gpus is None else GpuInventory(config.gpus)
    islands = found.islands if config.gpu_islands is None else config.gpu_islands
    whole = complete_islands(islands, found.count)
    return replace(found, islands=() if len(whole) <= 1 else whole)
