"""A registration whose agent stopped waiting for the answer while it queued behind the
cluster's writer is not made when its turn comes; one whose agent still waits is."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from sqlalchemy.exc import IntegrityError

from hal.core.node import Node
from hal.state import agents
from hal.state.cluster import Cluster
from hal.state.store import DatabaseUnavailable
from hal.testing.mirror import counted, intercept
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
    transactions = counted(cluster)
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
    assert transactions == [1]
    assert isinstance(answers[7], agents.AgentGone)
    made = [a.node for a in answers if isinstance(a, AgentRegistered)]
    assert made == [n for n in names if n != "burst7"]
    assert "burst7" not in cluster.nodes and not cluster.registering
    stored = [e.node for e in cluster.recent_events if e.kind == "node.registered"]
    assert stored == made


def _queue_and_answer(cluster: Cluster, names: list[str]) -> list[BaseException | AgentRegistered]:
    """Registrations of ``names`` queued while the writer is busy (one batch), answered."""

    async def scenario() -> list[BaseException | AgentRegistered]:
        async with cluster.change():
            tasks = [
                asyncio.create_task(
                    agents.register(cluster, AgentRegister(node=n, cpus=2, memory_bytes=1 << 30))
                )
                for n in names
            ]
            await asyncio.sleep(0.01)
        return await asyncio.gather(*tasks, return_exceptions=True)

    return asyncio.run(scenario())


def _refusing(cluster: Cluster, error: Callable[[str], Exception]) -> list[str]:
    """Make the store refuse any transaction that writes the node ``bad`` with
    ``error(node)``; the list returned gathers the nodes each transaction wrote."""
    written: list[str] = []

    def check(nodes: list[Node]) -> None:
        for node in nodes:
            written.append(node.name)
            if node.name == "bad":
                raise error(node.name)

    intercept(cluster, "upsert_nodes", check)
    return written


def test_a_row_the_store_refuses_fails_only_its_own_registration(cluster: Cluster) -> None:
    """A batch of registrations with one node's row the database refuses (bad data, not
    an outage): the batch is committed again one at a time, the other agents register
    and only that one gets the error."""
    written = _refusing(
        cluster, lambda node: IntegrityError("INSERT INTO nodes", {}, ValueError(node))
    )
    names = ["ok0", "bad", "ok1", "ok2"]
    answers = _queue_and_answer(cluster, names)
    assert isinstance(answers[1], IntegrityError)
    made = [a.node for a in answers if isinstance(a, AgentRegistered)]
    assert made == ["ok0", "ok1", "ok2"]
    assert "bad" not in cluster.nodes and "bad" not in cluster.agent_sessions
    assert written == ["ok0", "bad", *names]  # the batch (to the refusal), then one at a time
    stored = [e.node for e in cluster.recent_events if e.kind == "node.registered"]
    assert stored == made


def test_an_outage_fails_the_whole_batch_each_with_its_own_error(cluster: Cluster) -> None:
    """The database down while a batch commits: every registration of it fails (no
    retrying one at a time against a store that is not there), and each agent's answer
    carries an exception of its own, raised from the store's."""
    written = _refusing(cluster, lambda node: DatabaseUnavailable("connection refused"))
    names = ["ok0", "bad", "ok1"]
    errors = [a for a in _queue_and_answer(cluster, names) if isinstance(a, DatabaseUnavailable)]
    assert len({id(e) for e in errors}) == 3
    cause = errors[0].__cause__
    assert isinstance(cause, DatabaseUnavailable)
    assert all(e.__cause__ is cause and str(e) == str(cause) for e in errors)
    assert written == ["ok0", "bad"]  # one transaction
    assert not any(n in cluster.nodes for n in names)
