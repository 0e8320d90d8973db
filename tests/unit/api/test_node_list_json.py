"""``GET /v1/nodes`` without a model per node (``cloud_nodes.node_list_json``): for nodes
of every shape — idle, running jobs on GPUs of NVLink islands, drained by an operator,
down and drained, in a maintenance reservation, with a host's load and free memory, a
``[cloud]`` group's registered node and its names not created yet — the answer is the
same bytes as the ``NodeList`` of ``NodeInfo`` models it replaces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import pytest
from pydantic import TypeAdapter

from hal.api.cloud_nodes import cloud_nodes, cluster_nodes, node_list_json
from hal.config.cloud import CloudConfig
from hal.config.model import HalConfig, PartitionConfig
from hal.core.clock import VirtualClock
from hal.core.node import Node
from hal.core.node_groups import NodeGroup
from hal.core.reservation import Reservation, ReservationFlag
from hal.core.resources import ResourceVector
from hal.core.states import NodeState
from hal.state.agents import AgentSession
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore
from hal.testing import make_job
from hal.testing.builders import make_node
from hal.wire.nodes import NodeList

if TYPE_CHECKING:
    from hal.server.cloud import CloudService

GiB = 1 << 30
NOW = 1_000_000.0
BURST = NodeGroup(
    name="burst",
    provider="local",
    nodes=("burst1", "burst2", "burst3"),
    resources=ResourceVector(cpus=4, memory_bytes=16 * GiB, gpus=1),
    features=("cloud",),
    gpu_model="nvidia_a100",
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    config = HalConfig(
        cluster_name="test",
        partitions=(
            PartitionConfig(name="debug", default=True),
            PartitionConfig(name="gpu", nodes=("gpu1", "burst1", "burst2")),
        ),
    )
    c = Cluster(store, config, VirtualClock(NOW))
    nodes = [
        make_node("plain").cpus(8).mem_gib(32).build(),
        make_node("gpu1")
        .cpus(64)
        .mem_gib(512)
        .gpus(8, "nvidia_h100")
        .islands((0, 1, 2, 3), (4, 5, 6, 7))
        .features("nvme", "ib")
        .labels(rack="r1", zone="z1")
        .nvlink_domain("nvl72-a")
        .build(),
        Node(
            "drained",
            ResourceVector(cpus=4, memory_bytes=GiB),
            state=NodeState.DRAIN,
            reason="fan × 2 failing",
            reason_user="root",
            reason_time=NOW - 60,
            address="10.0.0.7",
        ),
        Node(
            "gone",
            ResourceVector(cpus=4, memory_bytes=GiB),
            state=NodeState.DOWN,
            drain=True,
            reason="not responding",
            last_heartbeat=NOW - 900,
        ),
        Node("maint", ResourceVector(cpus=2, memory_bytes=GiB), last_heartbeat=NOW - 1),
        Node("burst1", ResourceVector(cpus=4, memory_bytes=16 * GiB, gpus=1)),
    ]
    for node in nodes:
        c.nodes[node.name] = node
    for name in ("plain", "gpu1", "drained", "burst1"):
        c.agent_sessions[name] = AgentSession(name, last_seen=NOW - 2)
    c.agent_sessions["gpu1"].cpu_load = 12.5
    c.agent_sessions["gpu1"].free_memory_bytes = 400 * GiB
    c.agent_sessions["plain"].cpu_load = 3  # an int where a float goes: still "3.0"
    c.reservations["fix"] = Reservation(
        "fix", NOW - 10, NOW + 3600, ("maint",), flags=frozenset({ReservationFlag.MAINT})
    )
    job = make_job(7).gpus(2).running_on("gpu1", start=NOW - 30, gpu_ids=((4, 5),)).build()
    c.put(job)
    yield c
    store.close()


def _cloud(cluster: Cluster) -> CloudService:
    fake = SimpleNamespace(config=CloudConfig(groups=(BURST,)), groups={}, cluster=cluster)
    return cast("CloudService", fake)


def test_the_node_list_is_the_models_json_byte_for_byte(cluster: Cluster) -> None:
    for cloud in (cloud_nodes(None), cloud_nodes(_cloud(cluster))):
        models = NodeList(nodes=cluster_nodes(cluster, cloud))
        assert node_list_json(cluster, cloud) == TypeAdapter(NodeList).dump_json(models)
    listed = {n.name: n for n in models.nodes}
    assert listed["gpu1"].jobs == [7] and listed["gpu1"].gpu_ids_alloc == [4, 5]
    assert "MAINTENANCE" in listed["maint"].state_flags
    assert "POWERED_DOWN" in listed["burst3"].state_flags
