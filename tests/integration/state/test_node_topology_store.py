"""A node's topology (labels, NVLink domain, GPU islands) survives a server restart on
SQLite and PostgreSQL: the placement tree is back before the agent registers again."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.node import Node
from hal.core.topology import LabelRule, Topology
from hal.state.agents import register
from hal.state.cluster import Cluster
from hal.state.migrations import STEPS
from hal.state.store import SqlStateStore
from hal.wire.agent import AgentRegister


def test_labels_domain_and_islands_are_reloaded(db_url: str) -> None:
    # the config labels zone z1 for g1: it joins the agent's rack label
    config = HalConfig(topology=Topology(label_rules=(LabelRule(("g1",), (("zone", "z1"),)),)))
    reg = AgentRegister(
        node="g1",
        cpus=4,
        memory_bytes=1 << 30,
        gpus=4,
        gpu_islands=[[0, 1], [2, 3]],
        topology_labels={"rack": "r7"},
        nvlink_domain="nvl0",
    )

    async def scenario() -> Node:
        first = Cluster(SqlStateStore(db_url), config, VirtualClock(1000.0))
        await first.load()
        await register(first, reg)
        await first.close()
        again = Cluster(SqlStateStore(db_url), config, VirtualClock(2000.0))
        await again.load()
        node = again.nodes["g1"]
        await again.close()
        return node

    node = asyncio.run(scenario())
    assert node.labels == {"rack": "r7", "zone": "z1"}
    assert node.nvlink_domain == "nvl0"
    assert node.gpu_islands == ((0, 1), (2, 3))
    assert node.topology == ("site=", "region=", "zone=z1", "rack=r7")


def test_migration_adds_the_node_topology_columns(db_url: str) -> None:
    """A database at schema version 3 gains the columns, old rows get empty defaults."""
    store = SqlStateStore(db_url)
    store.migrate()
    with store.engine.begin() as conn:
        for column in ("topology_labels", "nvlink_domain", "gpu_islands"):
            conn.execute(text(f"ALTER TABLE nodes DROP COLUMN {column}"))
        conn.execute(text("UPDATE hal_meta SET value = 3 WHERE key = 'schema_version'"))
        conn.execute(
            text(
                "INSERT INTO nodes (name, cpus, memory_bytes, gpus, gpu_model, features, "
                "state, reason, address, last_heartbeat) "
                "VALUES ('old', 1, 1024, 0, '', '[]', 'UP', '', '', 0.0)"
            )
        )
    store.close()
    again = SqlStateStore(db_url)
    again.migrate()
    (old,) = again.load_nodes()
    again.close()
    assert len(STEPS) >= 4
    assert (old.labels, old.nvlink_domain, old.gpu_islands) == ({}, "", ())
