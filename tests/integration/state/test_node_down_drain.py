"""Node states an admin sets and reads (Slurm 22.05.8, docs/slurm-checks.md):
a drained node set DOWN stays drained (``State=DOWN+DRAIN``) over an agent's restart and
the server's, until resumed; a node in a maintenance reservation is reserved too; and
``LastHeartbeat=`` follows the agent's syncs, not its registration."""

from __future__ import annotations

import asyncio

from hal.api.convert import node_info
from hal.compat.node_states import scontrol_state, state_compact, state_long
from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.reservation import Reservation, ReservationFlag
from hal.core.states import NodeState
from hal.state import agents
from hal.state.cluster import Cluster
from hal.state.node_flags import DRAIN, MAINTENANCE, RESERVED
from hal.state.store import SqlStateStore
from hal.wire.agent import AgentRegister
from hal.wire.nodes import NodeInfo


def test_a_drained_node_set_down_keeps_its_drain_until_resumed(db_url: str) -> None:
    """``state=drain reason=second`` then ``state=down reason=third``: Slurm shows
    ``State=DOWN+DRAIN`` and sinfo ``drain``/``drained``; ``resume`` brings it back idle.
    HAL showed ``State=DOWN`` and ``down`` (the admin's report, A10)."""
    config = HalConfig()

    async def scenario() -> tuple[NodeInfo, NodeInfo, NodeInfo, NodeInfo, NodeState]:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), config, clock)
        await cluster.load()
        await agents.register(cluster, AgentRegister(node="n1", cpus=2, memory_bytes=1 << 30))
        await agents.set_node_state(cluster, "n1", "DRAIN", "second", user="root")
        await agents.set_node_state(cluster, "n1", "DOWN", "third", user="root")
        down = node_info(cluster.nodes["n1"], cluster)
        await cluster.close()
        again = Cluster(SqlStateStore(db_url), config, VirtualClock(2000.0))
        await again.load()
        # the agent comes back: an operator's DOWN+DRAIN stays as it is
        await agents.register(again, AgentRegister(node="n1", cpus=2, memory_bytes=1 << 30))
        reloaded = node_info(again.nodes["n1"], again)
        # a new reason for the down node (scontrol update Reason= alone sends its state)
        await agents.set_node_state(again, "n1", "DOWN", "fourth", user="root")
        reworded = node_info(again.nodes["n1"], again)
        await agents.set_node_state(again, "n1", "RESUME", "", user="root")
        resumed = node_info(again.nodes["n1"], again)
        await again.close()
        last = Cluster(SqlStateStore(db_url), config, VirtualClock(3000.0))
        await last.load()
        state = last.nodes["n1"].state
        await last.close()
        return down, reloaded, reworded, resumed, state

    down, reloaded, reworded, resumed, stored = asyncio.run(scenario())
    for info in (down, reloaded, reworded):
        assert (info.state, info.display_state, DRAIN in info.state_flags) == ("DOWN", "down", True)
        assert scontrol_state(info) == "DOWN+DRAIN"
        assert (state_compact(info), state_long(info)) == ("drain", "drained")
    assert (reloaded.reason, reworded.reason) == ("third", "fourth")
    assert (resumed.state, resumed.display_state, resumed.state_flags) == ("UP", "idle", [])
    assert stored is NodeState.UP


def test_a_maintenance_node_is_reserved_and_heartbeats_show(db_url: str) -> None:
    """Slurm 22.05.8: ``State=IDLE+MAINTENANCE+RESERVED`` under a MAINT reservation (HAL
    said IDLE+MAINTENANCE); ``LastHeartbeat=`` is the agent's latest sync (HAL's stayed
    at its registration)."""

    async def scenario() -> NodeInfo:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        await agents.register(cluster, AgentRegister(node="n1", cpus=2, memory_bytes=1 << 30))
        maint = frozenset({ReservationFlag.MAINT})
        cluster.reservations["mm"] = Reservation("mm", 900.0, 5000.0, ("n1",), flags=maint)
        clock.advance(420)
        cluster.agent_sessions["n1"].last_seen = clock.now()
        info = node_info(cluster.nodes["n1"], cluster)
        await cluster.close()
        return info

    info = asyncio.run(scenario())
    assert info.state_flags == [MAINTENANCE, RESERVED]
    assert scontrol_state(info) == "IDLE+MAINTENANCE+RESERVED"
    assert info.last_heartbeat == 1420.0
