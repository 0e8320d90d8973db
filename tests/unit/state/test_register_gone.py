"""A registration whose agent stopped waiting for the answer while it queued behind the
cluster's writer is not made when its turn comes; one whose agent still waits is."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hal.state import agents
from hal.state.cluster import Cluster
from hal.wire.agent import AgentRegister, AgentRegistered


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


def test_registrations_queued_together_commit_in_one_transaction(cluster: Cluster) -> None:
    """10,000 agents starting together: the registrations that queued while the writer
    was busy are written by one transaction, in the order they came, and each agent gets
    its own answer; one whose agent left meanwhile is still not made."""
    transactions = 0
    opened = cluster.store.transaction

    def counted() -> Any:
        nonlocal transactions
        transactions += 1
        return opened()

    cluster.store.transaction = counted  # type: ignore[method-assign]
    names = [f"burst{i}" for i in range(40)]

    async def scenario() -> list[BaseException | AgentRegistered]:
        async def gone() -> bool:
            return True

        async with cluster.change():  # the writer is busy: all of them queue
            tasks = [
                asyncio.create_task(
                    agents.register(
                        cluster,
                        AgentRegister(node=name, cpus=2, memory_bytes=1 << 30),
                        gone if name == "burst7" else None,
                    )
                )
                for name in names
            ]
            await asyncio.sleep(0.01)
            assert len(cluster.registering) == len(names)
        return await asyncio.gather(*tasks, return_exceptions=True)

    answers = asyncio.run(scenario())
    assert transactions == 1
    assert isinstance(answers[7], agents.AgentGone)
    made = [a.node for a in answers if isinstance(a, AgentRegistered)]
    assert made == [n for n in names if n != "burst7"]
    assert "burst7" not in cluster.nodes and not cluster.registering
    stored = [e.node for e in cluster.recent_events if e.kind == "node.registered"]
    assert stored == made
