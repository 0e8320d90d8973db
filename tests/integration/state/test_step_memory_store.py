"""Steps hold their job's memory, as Slurm 22.05.8's do with memory a consumable
resource, given by the control plane on real SQLite and PostgreSQL: a step without
``--mem`` holds all the job's memory on its nodes (``--exact`` too), one with ``--mem``
what it asks, one with ``--overlap`` none; a step that finds too little free is refused
for now (``BUSY``: srun waits), on the batch node too; more than the job has is refused
outright; a job that asked for no memory holds none for its steps; a restarted server
still knows who holds what (``running_steps.memory``, migration 20)
(docs/slurm-checks.md, "Steps hold their job's memory")."""

from __future__ import annotations

import asyncio

import pytest
from test_step_usage_store import ANN, loaded, two_node_job  # (two CPUs, no memory, on n1, n2)

from hal.core.errors import Conflict, InvalidRequest
from hal.core.job import Allocation, JobSpec
from hal.core.resources import ResourceVector
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.slurm.steps import BUSY, StepRequest
from hal.state.cluster import Cluster
from hal.state.steps import StepTable
from hal.wire.agent import StepEnd

M = 1 << 20


def on_n1(*, mem_per_node: int | None = None, mem_per_cpu: int | None = None) -> StepRequest:
    """One task on n1 with ``--exact``."""
    return StepRequest(
        1, 1, nodelist=("n1",), exact=True, mem_per_node=mem_per_node, mem_per_cpu=mem_per_cpu
    )


async def memory_job(cluster: Cluster) -> int:
    """A job of 800 MiB (``--mem``) and two CPUs on each of n1 and n2."""
    job_id = await two_node_job(cluster)  # (its nodes, then a job with memory on them)
    spec = JobSpec(user="ann", script="#!/bin/sh\nsleep 60\n").with_changes(
        nodes_min=2, ntasks=4, memory_per_node_bytes=800 * M
    )
    (job,) = await cluster.submit([spec])
    two = ResourceVector(2, 800 * M)
    plan = Plan(cluster.revision, (Placement(job.job_id, Allocation(("n1", "n2"), (two, two))),))
    await cluster.apply_plan(plan)
    assert job_id != job.job_id
    return job.job_id


def test_steps_hold_the_jobs_memory_until_their_part_ends(db_url: str) -> None:
    async def main() -> None:
        async with loaded(db_url) as cluster:
            job_id = await memory_job(cluster)
            table = StepTable(cluster)
            first = await table.create(job_id, ANN, on_n1(), ["a"], {})
            assert first.memory == {"n1": 800 * M}  # one CPU, all the job's memory there
            assert first.cpus == {"n1": (0,)}
            with pytest.raises(Conflict) as busy:  # a CPU free, no memory
                await table.create(job_id, ANN, on_n1(mem_per_node=M), ["b"], {})
            assert busy.value.field == BUSY
            assert "hold 800 of its 800 MiB of memory on n1" in busy.value.message
            with pytest.raises(Conflict):  # srun on the batch node waits as well
                await table.open_local(job_id, ANN, "n1", 1, "c", on_n1())
            beside = await table.create(job_id, ANN, StepRequest(overlap=True), ["d"], {})
            assert (beside.memory, beside.memory_bytes) == ({}, 1600 * M)  # would hold
            with pytest.raises(InvalidRequest, match="Memory required by task is not available"):
                await table.create(job_id, ANN, on_n1(mem_per_node=801 * M), ["e"], {})

            restarted = StepTable(cluster)  # a new server: what it finds kept
            assert await restarted.restore() == 2
            assert restarted.steps[(job_id, 0, first.step_id)].memory_bytes == 800 * M
            with pytest.raises(Conflict):
                await restarted.create(job_id, ANN, on_n1(mem_per_node=M), ["b"], {})
            end = StepEnd(job_id=job_id, step_id=first.step_id, exit_code=0)
            await restarted.received("n1", [], [end])  # its part ends: its memory is free
            half = on_n1(mem_per_node=400 * M)
            one = await restarted.create(job_id, ANN, half, ["f"], {})
            two = await restarted.open_local(job_id, ANN, "n1", 1, "g", half)
            assert one.memory == two.memory == {"n1": 400 * M}  # together
            await restarted.end_local(two, 0, 0, oom=False, cancelled=False)
            whole = await restarted.create(job_id, ANN, on_n1(mem_per_node=0), ["h"], {})
            assert (whole.memory, whole.memory_bytes) == ({}, 800 * M)  # --mem=0: holds none
            end = StepEnd(job_id=job_id, step_id=whole.step_id, exit_code=0)
            await restarted.received("n1", [], [end])
            per_cpu = await restarted.create(job_id, ANN, on_n1(mem_per_cpu=300 * M), ["i"], {})
            assert per_cpu.memory == {"n1": 300 * M}  # beside one's 400 of 800

    asyncio.run(main())


def test_a_job_without_memory_holds_none_for_its_steps(db_url: str) -> None:
    """As Slurm's job without ``--mem``: its ``--exact`` steps run together."""

    async def main() -> None:
        async with loaded(db_url) as cluster:
            job_id = await two_node_job(cluster)
            table = StepTable(cluster)
            one = await table.create(job_id, ANN, on_n1(), ["a"], {})
            two = await table.create(job_id, ANN, on_n1(mem_per_node=500 * M), ["b"], {})
            assert one.memory == two.memory == {}
            assert one.memory_bytes == 0  # scontrol show step: mem=0

    asyncio.run(main())
