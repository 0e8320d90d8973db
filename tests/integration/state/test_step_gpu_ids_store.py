"""Steps with GPUs of their own (srun --gpus, --gpus-per-node, --gres=gpu:N), given by
the control plane on real SQLite and PostgreSQL: each gets free GPUs of its job on every
node, none another running step holds; one that finds too few free is refused for now
(``BUSY``: srun waits); its GPUs come back as its part on a node ends; a restarted
server still knows who holds what (``running_steps.gpu_ids``, migration 17); more than
the job has is refused outright. A step asking for none holds none."""

from __future__ import annotations

import asyncio

import pytest
from test_step_usage_store import ANN

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.errors import Conflict, InvalidRequest
from hal.core.job import Allocation, JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.slurm.steps import BUSY, StepRequest
from hal.state.agents import AgentSession
from hal.state.cluster import Cluster
from hal.state.steps import StepTable
from hal.state.store import SqlStateStore
from hal.wire.agent import StepEnd, StepLaunch


async def gpu_job(cluster: Cluster) -> int:
    """Two nodes, two tasks, four CPUs and two GPUs (0 and 1) on each."""
    for name in ("n1", "n2"):
        cluster.nodes[name] = Node(name, ResourceVector(cpus=4, memory_bytes=4 * GiB, gpus=2))
        cluster.agent_sessions[name] = AgentSession(name)
    spec = JobSpec(user="ann", script="#!/bin/sh\nsleep 60\n").with_changes(nodes_min=2, ntasks=4)
    (job,) = await cluster.submit([spec])
    four = ResourceVector(4, 0, gpus=2)
    alloc = Allocation(("n1", "n2"), (four, four), ((0, 1), (0, 1)))
    await cluster.apply_plan(Plan(cluster.revision, (Placement(job.job_id, alloc),)))
    return job.job_id


def launched(cluster: Cluster, node: str) -> list[list[int] | None]:
    """The GPUs of each step launch pushed to ``node``'s agent so far."""
    return [m.gpu_ids for m in cluster.agent_sessions[node].outbox if isinstance(m, StepLaunch)]


def test_steps_hold_their_own_gpus_until_their_part_ends(db_url: str) -> None:
    async def main() -> None:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(1000.0))
        await cluster.load()
        try:
            job_id = await gpu_job(cluster)
            table = StepTable(cluster)
            # (one task per node and --exact: each holds one CPU of four there)
            one_each = StepRequest(ntasks=2, gpus_per_node=1, exact=True)
            first = await table.create(job_id, ANN, one_each, ["train"], {})
            both = StepRequest(ntasks=2, gpus=2, exact=True)
            second = await table.create(job_id, ANN, both, ["train"], {})
            plain = await table.create(job_id, ANN, StepRequest(overlap=True), ["hostname"], {})
            assert first.gpu_ids == {"n1": (0,), "n2": (0,)}
            assert second.gpu_ids == {"n1": (1,), "n2": (1,)}  # --gpus=2: one per node
            assert plain.gpu_ids == {}
            assert launched(cluster, "n1") == [[0], [1], None]
            with pytest.raises(Conflict) as busy:
                await table.create(job_id, ANN, one_each, ["train"], {})
            assert busy.value.field == BUSY
            assert "Requested nodes are busy" in busy.value.message
            assert "GPUs on n1 are held" in busy.value.message  # (two CPUs are free)
            with pytest.raises(InvalidRequest, match="Invalid generic resource"):
                await table.create(job_id, ANN, StepRequest(gpus_per_node=3), ["x"], {})

            restarted = StepTable(cluster)  # a new server: what it finds kept
            assert await restarted.restore() == 3
            with pytest.raises(Conflict):
                await restarted.create(job_id, ANN, one_each, ["train"], {})
            end = StepEnd(job_id=job_id, step_id=first.step_id, exit_code=0)
            await restarted.received("n1", [], [end])  # its part on n1 ends: GPU 0 is free
            on_n1 = StepRequest(nodes=1, nodelist=("n1",), gpus_per_task=1, ntasks=1, exact=True)
            third = await restarted.create(job_id, ANN, on_n1, ["train"], {})
            assert third.gpu_ids == {"n1": (0,)}
        finally:
            await cluster.close()

    asyncio.run(main())
