"""The nodes of ``[cloud]`` groups as Slurm shows its cloud nodes (``State=CLOUD``).

A group's node names are in no node list until the autoscaler (``hal.server.cloud``) made
an instance for one and its agent registered; the scheduler sees only registered nodes
and this stays so. What ``sinfo``, ``scontrol show node`` and the REST node listings
show is Slurm's view instead (checked on Slurm 22.05.8 with ``PrivateData=cloud``, whose
lines tests/unit/compat/test_sinfo_cloud_nodes.py holds), made here from the autoscaler's
last pass:

- a name without an instance: powered down, ``idle~``, ``IDLE+CLOUD+POWERED_DOWN``,
  with the group's size (CPUs, memory, GPUs, features) as its configured size;
- a name whose instance boots (its agent has not registered): powering up, ``idle#``,
  ``IDLE+CLOUD+NOT_RESPONDING+POWERING_UP`` (HAL's job waits for the node, so the
  node holds none, where Slurm's shows ``mix#``/``alloc#`` with the job configuring);
- a name whose only instance is being removed: powering down, ``idle%``,
  ``IDLE+CLOUD+POWERING_DOWN``;
- a registered node of a group: an ordinary node with the ``CLOUD`` flag
  (``IDLE+CLOUD``, ``MIXED+CLOUD`` ...; ``sinfo`` shows no suffix for it), powering
  down (``idle%``) while the autoscaler drains and removes it for idleness.

Slurm without ``PrivateData=cloud`` hides its powered-down cloud nodes from ``sinfo`` and
``scontrol show node`` (not from ``scontrol show partition``); HAL always shows them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from pydantic_core import to_json

from hal.api.convert import node_fields, node_info
from hal.cloud.provider import STOPPING
from hal.core.node import Node
from hal.core.node_groups import NodeGroup
from hal.core.states import NodeState
from hal.server.cloud import IDLE_REASON, CloudService
from hal.server.services import Services
from hal.state.cluster import Cluster
from hal.state.node_flags import (
    CLOUD,
    NOT_RESPONDING,
    POWERED_DOWN,
    POWERING_DOWN,
    POWERING_UP,
)
from hal.wire.nodes import NodeInfo

# what the autoscaler's last pass says of a group's node name
BOOTING = "booting"  # an instance not being removed (booting, unless its node registered)
STOPPING_ONLY = "stopping"  # only instances being removed
ABSENT = "absent"  # no instance


def cloud_of(request: Request) -> CloudService | None:
    """The server's autoscaler (``HalServer.start`` sets it); None without ``[cloud]``."""
    services: Services = request.app.state.ctx
    return services.cloud


@dataclass(frozen=True, slots=True)
class CloudNodes:
    """The groups' node names and what their instances do, read once per request."""

    groups: Mapping[str, NodeGroup] = field(default_factory=dict)  # node name → group
    phases: Mapping[str, str] = field(default_factory=dict)  # BOOTING or STOPPING_ONLY

    def registered(self, node: Node, display: str, flags: list[str]) -> tuple[str, list[str]]:
        """A registered node's sinfo state and flags: as they are for a node of no group;
        for a group's node with ``CLOUD`` added, and powering down (``idle%``) while
        the autoscaler removes it: drained for idleness with no job left, or its only
        instance being removed."""
        if node.name not in self.groups:
            return display, flags
        extra = {CLOUD}
        removing = node.state is NodeState.DRAIN and node.reason == IDLE_REASON
        if self.phases.get(node.name) == STOPPING_ONLY or (removing and display == "drain"):
            extra.add(POWERING_DOWN)
            display = "idle" if display == "drain" else display
        return display, sorted(set(flags) | extra)

    def unregistered(self, name: str) -> list[str]:
        """The flags of a group's name with no registered node, in Slurm's order."""
        phase = self.phases.get(name, ABSENT)
        if phase == BOOTING:  # (Slurm's node powering up is not responding too)
            return sorted({CLOUD, POWERING_UP, NOT_RESPONDING})
        return [CLOUD, POWERING_DOWN if phase == STOPPING_ONLY else POWERED_DOWN]

    def unjoined(self, cluster: Cluster) -> list[str]:
        """The group names that are no registered node, in name order."""
        return sorted(n for n in self.groups if n not in cluster.nodes)


def cloud_nodes(cloud: CloudService | None) -> CloudNodes:
    """What ``cloud``'s groups and last pass say (nothing without ``[cloud]``). Reads the
    service's public state only: ``config`` and ``groups``' instances."""
    if cloud is None:
        return CloudNodes()
    groups: dict[str, NodeGroup] = {}
    phases: dict[str, str] = {}
    for group in cloud.config.groups:
        groups.update(dict.fromkeys(group.nodes, group))
        state = cloud.groups.get(group.name)
        for inst in state.instances if state is not None else ():
            if inst.node in group.nodes and phases.get(inst.node) != BOOTING:
                phases[inst.node] = STOPPING_ONLY if inst.state == STOPPING else BOOTING
    return CloudNodes(groups=groups, phases=phases)


def unjoined_info(name: str, cloud: CloudNodes, cluster: Cluster) -> NodeInfo:
    """A group's name with no registered node, as the node it will be: the group's size,
    no jobs, no agent (``NodeInfo.state`` UP: a job may ask for it, and the autoscaler
    makes it)."""
    group = cloud.groups[name]
    node = group.template(name)
    return NodeInfo(
        name=name,
        state="UP",
        display_state="idle",
        state_flags=cloud.unregistered(name),
        cpus=node.resources.cpus,
        cpus_alloc=0,
        memory_bytes=node.resources.memory_bytes,
        memory_alloc_bytes=0,
        gpus=node.resources.gpus,
        gpus_alloc=0,
        gpu_model=node.gpu_model,
        features=list(node.features),
        partitions=[p.name for p in cluster.partitions.values() if p.contains(name)],
    )


def cluster_nodes(cluster: Cluster, cloud: CloudNodes) -> list[NodeInfo]:
    """Every node in name order: the registered ones, and the ``[cloud]`` groups' names
    that are no registered node, as Slurm lists its powered-down cloud nodes."""
    return [NodeInfo(**row) for row in _node_rows(cluster, cloud)]


def node_list_json(cluster: Cluster, cloud: CloudNodes) -> bytes:
    """``NodeList(nodes=cluster_nodes(cluster, cloud))`` as JSON, the same bytes, without
    a pydantic model per registered node: building and validating one cost about 10 µs
    a node, a tenth of a second a list at 10,000 nodes (``bench/heartbeat_edge.py``)."""
    return to_json({"nodes": _node_rows(cluster, cloud)})


def _node_rows(cluster: Cluster, cloud: CloudNodes) -> list[dict[str, Any]]:
    """``cluster_nodes``' nodes as ``NodeInfo``'s fields in plain values, in name order."""
    rows = [node_fields(node, cluster, cloud) for node in cluster.nodes.values()]
    rows += [unjoined_info(name, cloud, cluster).model_dump() for name in cloud.unjoined(cluster)]
    rows.sort(key=lambda row: str(row["name"]))
    return rows


def one_node(name: str, cluster: Cluster, cloud: CloudNodes) -> NodeInfo | None:
    """Node ``name`` (a group's name not created yet too); None for no such node."""
    node = cluster.nodes.get(name)
    if node is not None:
        return node_info(node, cluster, cloud)
    return unjoined_info(name, cloud, cluster) if name in cloud.groups else None
