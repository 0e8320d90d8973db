"""Step ids on real SQLite and PostgreSQL: a job script that starts several sruns at once
(``srun a & srun b & wait``) gets one step id per srun, whether srun runs the step on the
batch node (``open_local``) or through the agents (``create``), numbered above the steps
accounting already holds."""

from __future__ import annotations

import asyncio

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Allocation, JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.slurm.steps import StepRequest
from hal.state.agents import AgentSession
from hal.state.cluster import Caller, Cluster
from hal.state.steps import StepTable
from hal.state.store import SqlStateStore, StepRow

ANN = Caller("ann")
NODES = ("n1", "n2")


async def running_job(cluster: Cluster) -> int:
    """A two-node job running on n1 and n2, both agents connected."""
    for name in NODES:
        cluster.nodes[name] = Node(name, ResourceVector(cpus=4, memory_bytes=4 * GiB))
        cluster.agent_sessions[name] = AgentSession(name)
    spec = JobSpec(user="ann", script="#!/bin/sh\nsleep 60\n").with_changes(nodes_min=2, ntasks=2)
    (job,) = await cluster.submit([spec])
    one_cpu = ResourceVector(1, 0)
    alloc = Allocation(NODES, (one_cpu, one_cpu))
    await cluster.apply_plan(Plan(cluster.revision, (Placement(job.job_id, alloc),)))
    return job.job_id


def test_sruns_started_together_get_distinct_step_ids(db_url: str) -> None:
    async def main() -> None:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(1000.0))
        await cluster.load()
        try:
            job_id = await running_job(cluster)
            earlier = StepRow(job_id, 4, "a.out", "n1", 1, "COMPLETED", 0, 1.0, 2.0)
            await cluster.db(cluster.store.record_step, earlier)
            table = StepTable(cluster)
            beside = StepRequest(overlap=True)  # (else each would wait for the job's CPUs)
            agents = [table.create(job_id, ANN, beside, ["hostname"], {}) for _ in range(8)]
            local = [table.open_local(job_id, ANN, "n1", 1, "true", beside) for _ in range(8)]
            steps = await asyncio.gather(*agents, *local)
            ids = sorted(s.step_id for s in steps)
            assert ids == list(range(5, 21)), ids
            assert len(table.of_job(job_id, ANN)) == 16
        finally:
            await cluster.close()

    asyncio.run(main())
