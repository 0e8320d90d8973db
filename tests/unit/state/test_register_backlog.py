"""Registrations past ``MAX_REGISTERING`` in progress are refused at once (503), store
nothing, and the next one after the backlog clears registers as before."""

from __future__ import annotations

import asyncio

import pytest

from hal.core.errors import Unavailable
from hal.state import agents
from hal.state.cluster import Cluster
from hal.wire.agent import AgentRegister


def register(cluster: Cluster, name: str) -> None:
    reg = AgentRegister(node=name, cpus=2, memory_bytes=1 << 30)
    asyncio.run(agents.register(cluster, reg))


def test_a_registration_past_the_backlog_is_refused_and_stores_nothing(cluster: Cluster) -> None:
    cluster.registering = agents.MAX_REGISTERING
    with pytest.raises(Unavailable, match="register again in a few seconds"):
        register(cluster, "late")
    assert "late" not in cluster.nodes and "late" not in cluster.agent_sessions
    assert cluster.registering == agents.MAX_REGISTERING  # the refusal took no slot
    cluster.registering = agents.MAX_REGISTERING - 1
    register(cluster, "late")
    assert cluster.nodes["late"].resources.cpus == 2
    assert cluster.registering == agents.MAX_REGISTERING - 1  # given back


def test_registrations_in_flight_are_counted_while_they_wait(cluster: Cluster) -> None:
    """Registrations wait on the cluster's one writer: each holds a slot until done."""

    async def scenario() -> list[int]:
        seen: list[int] = []
        async with cluster.change():  # the writer is busy: registrations queue
            tasks = [
                asyncio.create_task(
                    agents.register(
                        cluster, AgentRegister(node=f"q{i}", cpus=1, memory_bytes=1 << 30)
                    )
                )
                for i in range(3)
            ]
            await asyncio.sleep(0.05)
            seen.append(cluster.registering)
        await asyncio.gather(*tasks)
        seen.append(cluster.registering)
        return seen

    assert asyncio.run(scenario()) == [3, 0]
    assert {"q0", "q1", "q2"} <= set(cluster.nodes)
