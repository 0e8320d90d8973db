"""Steps hold their job's CPUs, as Slurm 22.05's do, given by the control plane on real
SQLite and PostgreSQL: a step without ``--exact`` holds all the job's CPUs on its nodes,
one with ``--exact`` (or ``-c``) its tasks', one with ``--overlap`` none; a step that
finds too few free is refused for now (``BUSY``: srun waits), on the batch node too
(a local step); its CPUs come back as its part on a node ends; a restarted server still
knows who holds what (``running_steps.cpus``, migration 19) and which srun runs a local
step (``running_steps.srun``); more than the job has is refused outright
(docs/slurm-checks.md, "Steps wait for the CPUs other steps hold")."""

from __future__ import annotations

import asyncio

import pytest
from test_step_usage_store import ANN, loaded, two_node_job  # (two CPUs of four on n1, n2)

from hal.core.errors import Conflict, InvalidRequest
from hal.slurm.steps import BUSY, StepRequest
from hal.state.steps import StepTable
from hal.wire.agent import StepEnd, StepLaunch


def on_n1(*, exact: bool = False, cpus_per_task: int | None = None) -> StepRequest:
    """One task on n1."""
    return StepRequest(1, 1, nodelist=("n1",), exact=exact, cpus_per_task=cpus_per_task)


def test_steps_hold_the_jobs_cpus_until_their_part_ends(db_url: str) -> None:
    async def main() -> None:
        async with loaded(db_url) as cluster:
            job_id = await two_node_job(cluster)
            table = StepTable(cluster)
            whole = await table.create(job_id, ANN, StepRequest(), ["a.out"], {})
            assert whole.cpus == {"n1": (0, 1), "n2": (0, 1)}  # all the job's, one task or four
            sent = [m for m in cluster.agent_sessions["n2"].outbox if isinstance(m, StepLaunch)]
            assert [m.cpus for m in sent] == [[0, 1]]  # the agent binds its tasks to them
            exact = on_n1(exact=True)
            with pytest.raises(Conflict) as busy:
                await table.create(job_id, ANN, exact, ["b"], {})
            assert busy.value.field == BUSY
            assert "Requested nodes are busy" in busy.value.message
            assert "hold 2 of its 2 CPU(s) on n1" in busy.value.message
            with pytest.raises(Conflict):  # srun on the batch node waits as well
                await table.open_local(job_id, ANN, "n1", 1, "c")
            beside = await table.create(job_id, ANN, StepRequest(overlap=True), ["d"], {})
            assert beside.cpus == {}
            # scontrol show step's CPUs=: what it holds, or with --overlap would hold
            assert (whole.cpu_count, beside.cpu_count) == (4, 4)
            beside_local = StepRequest(overlap=True)
            local = await table.open_local(job_id, ANN, "n1", 1, "e", beside_local, srun="77:901")
            assert local.cpus == {}
            with pytest.raises(InvalidRequest, match="More processors requested than permitted"):
                await table.create(job_id, ANN, on_n1(cpus_per_task=3), ["f"], {})

            restarted = StepTable(cluster)  # a new server: what it finds kept
            assert await restarted.restore() == 3
            assert restarted.steps[(job_id, 0, local.step_id)].srun == "77:901"  # its srun kept
            with pytest.raises(Conflict):
                await restarted.create(job_id, ANN, exact, ["b"], {})
            end = StepEnd(job_id=job_id, step_id=whole.step_id, exit_code=0)
            await restarted.received("n1", [], [end])  # its part on n1 ends: n1's CPUs free
            first = await restarted.create(job_id, ANN, exact, ["b"], {})
            assert first.cpus == {"n1": (0,)}  # the first of the job's two there
            assert first.cpu_count == 1
            one_cpu = on_n1(cpus_per_task=1)
            second = await restarted.open_local(job_id, ANN, "n1", 1, "g", one_cpu)  # -c: exact
            assert second.cpus == {"n1": (1,)}
            with pytest.raises(Conflict):  # both of n1's CPUs held again
                await restarted.create(job_id, ANN, exact, ["b"], {})
            on_n2 = StepRequest(nodes=1, nodelist=("n2",), ntasks=1, exact=True)
            with pytest.raises(Conflict, match="on n2"):  # the first step still holds n2
                await restarted.create(job_id, ANN, on_n2, ["h"], {})
            await restarted.end_local(second, 0, 0, oom=False, cancelled=False)
            third = await restarted.create(job_id, ANN, exact, ["b"], {})
            assert third.cpus == {"n1": (1,)}  # the one the local step gave back

    asyncio.run(main())
