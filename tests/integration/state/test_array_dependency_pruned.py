"""A dependency on a job array is judged on every element, also once some of them have
left the server's memory (ended more than MinJobAge ago): an ``afterok`` on an array one
of whose elements failed never becomes satisfied, whenever the others end."""

from __future__ import annotations

import asyncio

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Allocation, ArraySpec, JobSpec
from hal.core.node import Node
from hal.core.resources import GiB, ResourceVector
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.scheduler.plugins import build_scheduler
from hal.slurm.syntax import parse_dependency
from hal.state import agents
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore
from hal.wire.agent import JobReport

SCRIPT = "#!/bin/sh\ntrue\n"


def test_an_afterok_on_an_array_stays_unsatisfied_after_a_failed_element_is_pruned(
    db_url: str,
) -> None:
    async def scenario() -> list[int]:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=4, memory_bytes=4 * GiB))
        array = JobSpec(user="ann", script=SCRIPT, array=ArraySpec((0, 1)))
        (done,) = await cluster.submit([array])
        first, second = done.task_ids
        one_cpu = Allocation(("n1",), (ResourceVector(1, 0),))
        placements = (Placement(first, one_cpu), Placement(second, one_cpu))
        await cluster.apply_plan(Plan(cluster.revision, placements))

        async def report(job_id: int, seq: int, state: str, exit_code: int) -> None:
            ended = JobReport(
                seq=seq,
                job_id=job_id,
                attempt=0,
                kind="finished",
                time=clock.now(),
                state=state,
                exit_code=exit_code,
            )
            await agents.apply_reports(cluster, "n1", [ended])

        await report(second, 1, "FAILED", 1)
        dependency = parse_dependency(f"afterok:{done.job_id}")
        await cluster.submit([JobSpec(user="ann", script=SCRIPT, dependency=dependency)])
        clock.advance(cluster.config.min_job_age_seconds + 1)
        cluster.prune()  # the failed element leaves memory
        await report(first, 2, "COMPLETED", 0)
        snap = await cluster.fill_related(cluster.snapshot())
        plan = build_scheduler().run_pass(snap).plan
        await cluster.close()
        return [p.job_id for p in plan.placements]

    assert asyncio.run(scenario()) == []  # the job behind the failed element waits on


def test_pruned_rows_are_read_once_and_again_after_more_elements_leave(db_url: str) -> None:
    """Every pass used to read the whole array from the store; now a pass reads it once,
    and again only when another element has left memory (its kept row may be stale)."""

    async def scenario() -> list[tuple[int, list[int]]]:
        clock = VirtualClock(1000.0)
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), clock)
        await cluster.load()
        cluster.nodes["n1"] = Node("n1", ResourceVector(cpus=4, memory_bytes=4 * GiB))
        reads = 0
        history = cluster.store.history

        def counted(**kw: object) -> list[object]:
            nonlocal reads
            reads += 1
            return history(**kw)

        cluster.store.history = counted
        array = JobSpec(user="ann", script=SCRIPT, array=ArraySpec((0, 1)))
        (done,) = await cluster.submit([array])
        first, second = done.task_ids
        one_cpu = Allocation(("n1",), (ResourceVector(1, 0),))
        placements = (Placement(first, one_cpu), Placement(second, one_cpu))
        await cluster.apply_plan(Plan(cluster.revision, placements))
        ended = JobReport(
            seq=1, job_id=second, attempt=0, kind="finished", time=clock.now(),
            state="COMPLETED", exit_code=0,
        )  # fmt: skip
        await agents.apply_reports(cluster, "n1", [ended])
        dependency = parse_dependency(f"afterok:{done.job_id}")
        await cluster.submit([JobSpec(user="ann", script=SCRIPT, dependency=dependency)])
        clock.advance(cluster.config.min_job_age_seconds + 1)
        cluster.prune()  # the completed element leaves memory
        seen: list[tuple[int, list[int]]] = []
        for _ in range(3):  # three passes while the first element runs
            snap = await cluster.fill_related(cluster.snapshot())
            plan = build_scheduler().run_pass(snap).plan
            seen.append((reads, [p.job_id for p in plan.placements]))
        ended = JobReport(
            seq=2, job_id=first, attempt=0, kind="finished", time=clock.now(),
            state="COMPLETED", exit_code=0,
        )  # fmt: skip
        await agents.apply_reports(cluster, "n1", [ended])
        clock.advance(cluster.config.min_job_age_seconds + 1)
        cluster.prune()  # the first element leaves too: the kept rows are stale
        snap = await cluster.fill_related(cluster.snapshot())
        plan = build_scheduler().run_pass(snap).plan
        seen.append((reads, [p.job_id for p in plan.placements]))
        await cluster.close()
        return seen

    seen = asyncio.run(scenario())
    assert [r for r, _ in seen] == [1, 1, 1, 2]
    assert [p for _, p in seen[:3]] == [[], [], []]  # the running element holds it back
    assert len(seen[3][1]) == 1  # both elements completed: the dependent job starts
