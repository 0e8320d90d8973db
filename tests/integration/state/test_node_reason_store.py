"""Who set a node's reason and when (sinfo -R, scontrol show node): an operator's name,
the server's account for its own reasons, kept over a restart on SQLite and PostgreSQL;
a database from before (migration 15) keeps its reasons with no one and no time."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.node import Node
from hal.core.states import NodeState
from hal.state import agents
from hal.state.cluster import Cluster
from hal.state.migrations import STEPS, _v15_node_reasons
from hal.state.node_reasons import server_user
from hal.state.store import SqlStateStore
from hal.wire.agent import AgentRegister


def test_who_and_when_are_set_cleared_and_reloaded(db_url: str) -> None:
    config = HalConfig()

    async def scenario() -> tuple[dict[str, Node], Node, Node]:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), config, clock)
        await cluster.load()
        for name in ("n1", "n2", "n3", "n4"):
            await agents.register(cluster, AgentRegister(node=name, cpus=2, memory_bytes=1 << 30))
        await agents.set_node_state(cluster, "n1", "DRAIN", "maint window", user="alice")
        clock.advance(5)
        await agents._gpu_health(cluster, "n4", ["GPU 0 lost"])
        await agents.set_node_state(cluster, "n3", "DRAIN", "cable", user="bob")
        await agents.set_node_state(cluster, "n3", "RESUME", "", user="bob")
        cluster.agent_sessions.pop("n2")
        cluster.agent_sessions.pop("n4")  # drained, then silent: it stays drained
        clock.advance(config.node_timeout_seconds + 1)
        cluster.nodes["n1"] = cluster.nodes["n1"].evolve(last_heartbeat=clock.now())
        cluster.nodes["n3"] = cluster.nodes["n3"].evolve(last_heartbeat=clock.now())
        assert await agents.check_nodes(cluster) == ["n2"]
        await cluster.close()
        again = Cluster(SqlStateStore(db_url), config, VirtualClock(9000.0))
        await again.load()
        reloaded = dict(again.nodes)
        # an agent registering again keeps the operator's drain, and who and when
        back = (await _reregister(again, "n1")).nodes["n1"]
        resumed = await agents.set_node_state(again, "n2", "RESUME", "", user="carol")
        await again.close()
        return reloaded, back, resumed

    nodes, back, resumed = asyncio.run(scenario())
    n1, n2, n3, n4 = nodes["n1"], nodes["n2"], nodes["n3"], nodes["n4"]
    assert (n1.state, n1.reason, n1.reason_user, n1.reason_time) == (
        NodeState.DRAIN,
        "maint window",
        "alice",
        1000.0,
    )
    # the GPU health drain and the silence: the server's own reasons, in its name
    assert (n4.state, n4.reason, n4.reason_user, n4.reason_time) == (
        NodeState.DRAIN,
        "gpu health: GPU 0 lost",
        server_user(),
        1005.0,
    )
    timeout_at = 1005.0 + HalConfig().node_timeout_seconds + 1
    assert (n2.state, n2.reason, n2.reason_user, n2.reason_time) == (
        NodeState.DOWN,
        "Not responding",
        server_user(),
        timeout_at,
    )
    assert (n3.state, n3.reason, n3.reason_user, n3.reason_time) == (NodeState.UP, "", "", None)
    assert (back.reason_user, back.reason_time) == ("alice", 1000.0)
    # resumed with no agent: down and not responding, said by the server now
    assert (resumed.reason, resumed.reason_user, resumed.reason_time) == (
        "Not responding",
        server_user(),
        9000.0,
    )


async def _reregister(cluster: Cluster, name: str) -> Cluster:
    await agents.register(cluster, AgentRegister(node=name, cpus=2, memory_bytes=1 << 30))
    return cluster


def test_gpu_health_drain_names_the_server(db_url: str) -> None:
    async def scenario() -> Node:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(500.0))
        await cluster.load()
        await agents.register(cluster, AgentRegister(node="g1", cpus=2, memory_bytes=1 << 30))
        await agents._gpu_health(cluster, "g1", ["GPU 1 uncorrectable ECC errors"])
        node = cluster.nodes["g1"]
        await cluster.close()
        return node

    node = asyncio.run(scenario())
    assert node.reason == agents.GPU_HEALTH + "GPU 1 uncorrectable ECC errors"
    assert (node.reason_user, node.reason_time) == (server_user(), 500.0)


def test_migration_15_keeps_old_reasons_with_no_one_and_no_time(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    before = STEPS.index(_v15_node_reasons)  # the version the step upgrades from
    with store.engine.begin() as conn:  # back to a database from before the step
        for column in ("reason_user", "reason_time"):
            conn.execute(text(f"ALTER TABLE nodes DROP COLUMN {column}"))
        conn.execute(text(f"UPDATE hal_meta SET value = {before} WHERE key = 'schema_version'"))
        conn.execute(
            text(
                "INSERT INTO nodes (name, cpus, memory_bytes, gpus, gpu_model, features, "
                "state, reason, address, last_heartbeat, topology_labels, nvlink_domain, "
                "gpu_islands) "
                "VALUES ('old', 1, 1024, 0, '', '[]', 'DRAIN', 'fan', '', 0.0, '{}', '', '[]')"
            )
        )
    store.close()
    again = SqlStateStore(db_url)
    assert again.migrate() == len(STEPS)
    (old,) = again.load_nodes()
    again.close()
    assert (old.state, old.reason, old.reason_user, old.reason_time) == (
        NodeState.DRAIN,
        "fan",
        "",
        None,
    )
