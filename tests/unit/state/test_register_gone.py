"""A registration whose agent stopped waiting for the answer while it queued behind the
cluster's writer is not made when its turn comes; one whose agent still waits is."""

from __future__ import annotations

import asyncio

import pytest

from hal.state import agents
from hal.state.cluster import Cluster
from hal.wire.agent import AgentRegister


def test_a_registration_nobody_waits_for_stores_nothing(cluster: Cluster) -> None:
    asked: list[str] = []

    async def queued(name: str, gone: bool) -> None:
        async def check() -> bool:
            asked.append(name)
            return gone

        reg = AgentRegister(node=name, cpus=2, memory_bytes=1 << 30)
        async with cluster.change():  # the writer is busy: the registration queues
            task = asyncio.create_task(agents.register(cluster, reg, check))
            await asyncio.sleep(0.01)
            assert not task.done() and name not in asked  # not asked before its turn
        await task

    async def scenario() -> None:
        with pytest.raises(agents.AgentGone):
            await queued("late", gone=True)
        await queued("waiting", gone=False)

    asyncio.run(scenario())
    assert asked == ["late", "waiting"]
    assert "late" not in cluster.nodes and "late" not in cluster.agent_sessions
    assert cluster.nodes["waiting"].resources.cpus == 2
    assert "waiting" in cluster.agent_sessions
