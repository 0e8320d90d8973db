"""An administrator's ``scontrol update PartitionName=`` is kept in the store
(migration 29) over a server restart, on SQLite and PostgreSQL, as ``slurmctld -R``
keeps its partitions; ``scontrol reconfigure`` empties it, as Slurm 22.05.8's
reconfigure goes back to slurm.conf (docs/slurm-checks.md)."""

from __future__ import annotations

import asyncio

import pytest

from hal.config.model import HalConfig, PartitionConfig
from hal.core.clock import VirtualClock
from hal.core.errors import Conflict, InvalidRequest
from hal.core.job import JobSpec
from hal.core.node import Partition
from hal.core.states import PartitionState
from hal.state.cluster import Cluster
from hal.state.config_change import take_config
from hal.state.partitions import PartitionUpdate, update_partition
from hal.state.store import SqlStateStore

CONFIG = HalConfig(
    partitions=(
        PartitionConfig(name="debug", default=True),
        PartitionConfig(name="other", max_time_s=1800),
    )
)


async def _cluster(db_url: str) -> Cluster:
    cluster = Cluster(SqlStateStore(db_url), CONFIG, VirtualClock(1000.0))
    await cluster.load()
    return cluster


def test_kept_over_a_restart_and_dropped_at_reconfigure(db_url: str) -> None:
    async def scenario() -> tuple[dict[str, Partition], str, dict[str, Partition], int]:
        cluster = await _cluster(db_url)
        await update_partition(
            cluster, "debug", PartitionUpdate(state=PartitionState.DRAIN, max_time_s=600), "root"
        )
        await update_partition(cluster, "other", PartitionUpdate(default=True), "root")
        await update_partition(cluster, "debug", PartitionUpdate(default_time_s=300), "root")
        await cluster.close()
        again = await _cluster(db_url)
        kept, default = dict(again.partitions), again.default_partition()
        await take_config(again, CONFIG, [], {}, lambda: None)
        await again.close()
        third = await _cluster(db_url)
        rows = len(await third.db(third.store.partition_overrides))
        await third.close()
        return kept, default, dict(third.partitions), rows

    kept, default, after, rows = asyncio.run(scenario())
    debug = kept["debug"]
    # the second update of debug kept the first's fields
    assert (debug.state, debug.max_time_s, debug.default_time_s, debug.default) == (
        PartitionState.DRAIN,
        600,
        300,
        False,
    )
    assert default == "other" and kept["other"].max_time_s == 1800
    assert after == {p.name: p for p in CONFIG.partition_objects()} and rows == 0


def test_submissions_and_bad_updates_are_refused(db_url: str) -> None:
    async def scenario() -> list[str]:
        cluster = await _cluster(db_url)
        said = []
        for state in (PartitionState.DRAIN, PartitionState.INACTIVE):
            await update_partition(cluster, "debug", PartitionUpdate(state=state), "root")
            with pytest.raises(Conflict) as err:
                cluster.admission.admit(JobSpec(user="u", script="#!/bin/sh\n"), None)
            said.append(err.value.message)
        # DOWN takes jobs (they wait), and so does -p debug,other while debug is drained
        await update_partition(cluster, "debug", PartitionUpdate(state=PartitionState.DOWN), "root")
        cluster.admission.admit(JobSpec(user="u", script="#!/bin/sh\n"), None)
        with pytest.raises(InvalidRequest, match="DefaultTime would exceed MaxTime"):
            await update_partition(cluster, "other", PartitionUpdate(default_time_s=3600), "root")
        with pytest.raises(Conflict, match="HAL keeps one"):
            await update_partition(cluster, "debug", PartitionUpdate(default=False), "root")
        await cluster.close()
        return said

    said = asyncio.run(scenario())
    assert all(s.startswith("Required partition not available (inactive or drain)") for s in said)
    assert "debug is DRAIN" in said[0] and "debug is INACTIVE" in said[1]
