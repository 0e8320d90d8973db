"""``hal.api.cloud_nodes``: the REST node listing of ``[cloud]`` groups' nodes made from
the autoscaler's last pass, on a real ``Cluster`` (no server, no agents): a name with no
instance is powered down, one whose instance boots is powering up, one whose instance is
being removed is powering down, a registered one carries ``CLOUD``; partitions hold the
names whether or not their nodes exist; the slurmrestd facade's state arrays follow."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import pytest

from hal.api.cloud_nodes import CloudNodes, cloud_nodes, cluster_nodes, one_node
from hal.api.convert import partition_info
from hal.api.slurmrest.views import node as rest_node
from hal.cloud.provider import RUNNING, STOPPING, Instance
from hal.config.cloud import CloudConfig
from hal.config.model import HalConfig, PartitionConfig
from hal.core.clock import VirtualClock
from hal.core.node import Node
from hal.core.node_groups import NodeGroup
from hal.core.resources import ResourceVector
from hal.core.states import NodeState
from hal.server.cloud import IDLE_REASON
from hal.state.agents import AgentSession
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore

if TYPE_CHECKING:
    from hal.server.cloud import CloudService

GiB = 1 << 30
NOW = 1_000_000.0

BURST = NodeGroup(
    name="burst",
    provider="local",
    nodes=("burst1", "burst2", "burst3", "burst4"),
    resources=ResourceVector(cpus=4, memory_bytes=16 * GiB, gpus=1),
    features=("cloud", "c7i"),
    gpu_model="nvidia_a100",
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    config = HalConfig(
        cluster_name="test",
        partitions=(
            PartitionConfig(name="debug", default=True),
            PartitionConfig(name="static", nodes=("node1",)),
            PartitionConfig(name="gpu", nodes=("burst1", "burst2")),
        ),
    )
    c = Cluster(store, config, VirtualClock(NOW))
    c.nodes["node1"] = Node("node1", ResourceVector(cpus=1, memory_bytes=GiB))
    c.agent_sessions["node1"] = AgentSession("node1", last_seen=NOW)
    yield c
    store.close()


def instance(node: str, state: str = RUNNING, created: float = NOW - 5) -> Instance:
    return Instance(id=f"i-{node}", node=node, group="burst", state=state, created_at=created)


def service(cluster: Cluster, *instances: Instance) -> CloudService:
    """What ``cloud_nodes`` reads of a ``CloudService``: its config and last pass."""
    groups = {"burst": SimpleNamespace(instances=list(instances))}
    fake = SimpleNamespace(config=CloudConfig(groups=(BURST,)), groups=groups, cluster=cluster)
    return cast("CloudService", fake)


def states(cluster: Cluster, cloud: CloudNodes) -> dict[str, tuple[str, list[str]]]:
    return {n.name: (n.display_state, n.state_flags) for n in cluster_nodes(cluster, cloud)}


def test_without_cloud_the_listing_is_the_registered_nodes(cluster: Cluster) -> None:
    cloud = cloud_nodes(None)
    listed = cluster_nodes(cluster, cloud)
    assert [n.name for n in listed] == ["node1"]
    assert listed[0].state_flags == []
    assert one_node("burst1", cluster, cloud) is None


def test_each_name_shows_what_its_instance_does(cluster: Cluster) -> None:
    # burst1 joined (its agent registered after the instance was made), burst2 boots,
    # burst3 is being removed, burst4 has no instance
    cluster.nodes["burst1"] = BURST.template("burst1")
    cluster.agent_sessions["burst1"] = AgentSession("burst1", last_seen=NOW)
    cloud = cloud_nodes(
        service(cluster, instance("burst1"), instance("burst2"), instance("burst3", STOPPING))
    )
    assert states(cluster, cloud) == {
        "burst1": ("idle", ["CLOUD"]),
        "burst2": ("idle", ["CLOUD", "NOT_RESPONDING", "POWERING_UP"]),
        "burst3": ("idle", ["CLOUD", "POWERING_DOWN"]),
        "burst4": ("idle", ["CLOUD", "POWERED_DOWN"]),
        "node1": ("idle", []),
    }


def test_a_name_not_created_has_its_groups_size(cluster: Cluster) -> None:
    info = one_node("burst4", cluster, cloud_nodes(service(cluster)))
    assert info is not None
    assert (info.state, info.display_state, info.state_flags) == (
        "UP",
        "idle",
        ["CLOUD", "POWERED_DOWN"],
    )
    assert (info.cpus, info.memory_bytes, info.gpus, info.gpu_model) == (
        4,
        16 * GiB,
        1,
        "nvidia_a100",
    )
    assert info.features == ["cloud", "c7i"]
    assert (info.cpus_alloc, info.memory_alloc_bytes, info.gpus_alloc, info.jobs) == (0, 0, 0, [])
    assert (info.address, info.last_heartbeat, info.free_memory_bytes) == ("", 0.0, None)
    assert info.partitions == ["debug"]
    first = one_node("burst1", cluster, cloud_nodes(service(cluster)))
    assert first is not None and first.partitions == ["debug", "gpu"]


def test_a_live_instance_beside_one_being_removed_is_booting(cluster: Cluster) -> None:
    cloud = cloud_nodes(
        service(cluster, instance("burst2", STOPPING, NOW - 60), instance("burst2", RUNNING))
    )
    assert states(cluster, cloud)["burst2"] == (
        "idle",
        ["CLOUD", "NOT_RESPONDING", "POWERING_UP"],
    )


def test_a_registered_node_keeps_its_own_flags_and_gets_cloud(cluster: Cluster) -> None:
    """A group node whose agent went silent: NOT_RESPONDING as any node, and CLOUD."""
    cluster.nodes["burst1"] = BURST.template("burst1")
    cloud = cloud_nodes(service(cluster, instance("burst1")))
    assert states(cluster, cloud)["burst1"] == ("idle", ["CLOUD", "NOT_RESPONDING"])
    assert states(cluster, cloud)["node1"] == ("idle", [])


def test_a_node_drained_for_idleness_is_powering_down(cluster: Cluster) -> None:
    """The autoscaler drains an idle node before it removes it (``IDLE_REASON``): Slurm's
    ``idle%`` (no job is left on it). A node drained for another reason stays drained."""
    cluster.nodes["burst1"] = BURST.template("burst1").evolve(
        state=NodeState.DRAIN, reason=IDLE_REASON
    )
    cluster.nodes["burst2"] = BURST.template("burst2").evolve(state=NodeState.DRAIN, reason="fan")
    for name in ("burst1", "burst2"):
        cluster.agent_sessions[name] = AgentSession(name, last_seen=NOW)
    cloud = cloud_nodes(service(cluster, instance("burst1"), instance("burst2")))
    assert states(cluster, cloud)["burst1"] == ("idle", ["CLOUD", "POWERING_DOWN"])
    assert states(cluster, cloud)["burst2"] == ("drain", ["CLOUD"])
    first = one_node("burst1", cluster, cloud)
    assert first is not None and (first.state, first.reason) == ("DRAIN", IDLE_REASON)


def test_partitions_hold_the_group_names(cluster: Cluster) -> None:
    cloud = cloud_nodes(service(cluster))
    parts = {p.name: partition_info(p, cluster, None, cloud) for p in cluster.partitions.values()}
    assert parts["debug"].nodes == ["burst1", "burst2", "burst3", "burst4", "node1"]
    assert parts["static"].nodes == ["node1"]
    assert parts["gpu"].nodes == ["burst1", "burst2"]
    # without [cloud], as before: the registered nodes only
    assert partition_info(cluster.partitions["gpu"], cluster).nodes == []


def test_the_slurmrest_state_arrays(cluster: Cluster) -> None:
    cloud = cloud_nodes(service(cluster, instance("burst2")))
    shown = {n.name: rest_node(n, "test")["state"] for n in cluster_nodes(cluster, cloud)}
    assert shown["burst1"] == ["IDLE", "CLOUD", "POWERED_DOWN"]
    assert shown["burst2"] == ["IDLE", "CLOUD", "NOT_RESPONDING", "POWERING_UP"]
    assert shown["node1"] == ["IDLE"]
