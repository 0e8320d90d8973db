"""The node-timeout check and an agent's registration race for the cluster lock: a node
that registered while the check waited stays UP."""

from __future__ import annotations

import asyncio

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.core.states import NodeState
from hal.state import agents
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore


def test_a_node_that_registers_while_the_check_waits_is_not_marked_down(db_url: str) -> None:
    async def scenario() -> tuple[list[str], NodeState, list[str]]:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=2, memory_bytes=GiB))
        clock.advance(HalConfig().node_timeout_seconds + 1)  # n1 has been silent too long
        async with cluster._lock:  # e.g. register() committing its row
            check = asyncio.create_task(agents.check_nodes(cluster))
            await asyncio.sleep(0)  # the check saw n1 silent and now waits for the lock
            cluster.nodes["n1"] = cluster.nodes["n1"].evolve(last_heartbeat=clock.now())
        marked = await check
        state = cluster.nodes["n1"].state
        clock.advance(HalConfig().node_timeout_seconds + 1)
        later = await agents.check_nodes(cluster)  # silent again: now it goes down
        await cluster.close()
        return marked, state, later

    marked, state, later = asyncio.run(scenario())
    assert (marked, state) == ([], NodeState.UP)
    assert later == ["n1"]
