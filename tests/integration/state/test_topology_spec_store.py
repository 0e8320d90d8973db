"""--switches and --topology survive a server restart on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import JobSpec, TopologyConstraint
from hal.core.topology import Switch, Topology
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore


def test_topology_fields_are_stored_and_reloaded(db_url: str) -> None:
    spec = JobSpec(
        user="alice",
        script="#!/bin/sh\ntrue\n",
        nodes_min=2,
        nodes_max=2,
        switches=1,
        switch_wait_s=600,
        topology=TopologyConstraint("spine", required=False),
    )

    # a spine level must exist: submit refuses a level the cluster lacks
    tree = Topology(
        (Switch("leaf0", nodes=("n1",)), Switch("spine0", switches=("leaf0",))),
        level_names=("leaf", "spine"),
    )
    config = HalConfig(topology=tree)

    async def scenario() -> JobSpec:
        first = Cluster(SqlStateStore(db_url), config, VirtualClock(1000.0))
        await first.load()
        done = await first.submit([spec])
        await first.close()
        again = Cluster(SqlStateStore(db_url), config, VirtualClock(1000.0))
        await again.load()
        stored = again.jobs[done[0].job_id].spec
        await again.close()
        return stored

    # (submit gives a job naming no QoS Slurm's default, normal)
    assert asyncio.run(scenario()) == spec.with_changes(qos="normal")
