"""Steps srun runs on the batch node, kept for a server restart on real SQLite and
PostgreSQL (``running_steps.local``, migration 13): a database from before keeps its
rows (agents' steps), and a restarted server ends a local step whose job ended while no
server ran (nothing else would: srun died with the job), as the job's end does."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Allocation, JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.slurm.steps import StepLayout
from hal.state import commands
from hal.state.cluster import Caller, Cluster
from hal.state.migrations import STEPS
from hal.state.step_restore import running_row
from hal.state.steps import StepTable
from hal.state.store import SqlStateStore

ANN = Caller("ann")


def test_a_version_11_database_gains_running_steps_local(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    with store.engine.begin() as conn:  # back to what version 11 created
        conn.execute(text("ALTER TABLE running_steps DROP COLUMN local"))
        conn.execute(
            text(
                "INSERT INTO running_steps (job_id, step_id, attempt, name, nodes, tasks, "
                "start_time, ended) VALUES (7, 0, 0, 'a.out', 'n1,n2', '1,1', 1.0, '{}')"
            )
        )
        conn.execute(text("UPDATE hal_meta SET value = 11 WHERE key = 'schema_version'"))
    assert store.migrate() == len(STEPS)
    (old,) = store.running_steps()
    assert (old.job_id, old.nodes, old.local) == (7, "n1,n2", False)
    store.close()


def test_a_local_step_of_a_job_that_ended_meanwhile_ends_at_restore(db_url: str) -> None:
    async def main() -> None:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(1000.0))
        await cluster.load()
        try:
            cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=4, memory_bytes=4 * GiB))
            spec = JobSpec(user="ann", script="#!/bin/sh\nsleep 60\n")
            ended, running = await cluster.submit([spec, spec])
            await commands.cancel(cluster, str(ended.job_id), ANN)
            alloc = Allocation(("n1",), (ResourceVector(1, 0),))
            await cluster.apply_plan(Plan(cluster.revision, (Placement(running.job_id, alloc),)))
            one = StepLayout(("n1",), (1,))
            for job_id in (ended.job_id, running.job_id):
                row = running_row(job_id, 0, 0, "a.out", one, 990.0, {}, False, local=True)
                await cluster.db(cluster.store.keep_running_step, row)
            table = StepTable(cluster)
            assert await table.restore() == 2
            gone = table.steps[(ended.job_id, 0, 0)]
            assert gone.local and (gone.state, gone.exit_code, gone.exit_signal) == (
                "CANCELLED",
                143,
                15,
            )
            assert table.steps[(running.job_id, 0, 0)].state == "RUNNING"
            (kept,) = await cluster.db(cluster.store.running_steps)
            assert (kept.job_id, kept.local) == (running.job_id, True)
            (recorded,) = await cluster.db(cluster.store.steps_of, [ended.job_id])
            assert (recorded.state, recorded.exit_signal) == ("CANCELLED", 15)
        finally:
            await cluster.close()

    asyncio.run(main())
