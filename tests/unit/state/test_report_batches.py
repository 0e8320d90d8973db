"""Agents' reports that queued while the cluster's writer was busy commit together: one
transaction for many syncs, each sync answered once its own reports are stored; an
outage fails every one of them (nothing mirrored, nothing acknowledged), and a row the
store refuses fails only the sync that sent it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from hal.core.job import Job
from hal.core.states import JobState
from hal.state import agents
from hal.state.cluster import Cluster
from hal.state.store import DatabaseUnavailable
from hal.testing import make_job
from hal.testing.builders import make_node
from hal.testing.mirror import counted, intercept, store
from hal.wire.agent import AgentInstructions, AgentRegister, AgentSync, JobReport

NODES = [f"n{i}" for i in range(1, 9)]


def running(cluster: Cluster, count: int = 8) -> None:
    """Jobs 1..count running on n1..n{count}, launched; jobs STEP+1..STEP+count just
    placed there."""
    for i in range(2, count + 1):
        cluster.nodes[f"n{i}"] = make_node(f"n{i}").cpus(2).mem_gib(4).build()
    store(
        cluster,
        *(
            make_job(i).running_on(f"n{i}", start=1.0).build().evolve(launched=True)
            for i in range(1, count + 1)
        ),
        *(make_job(STEP + i).running_on(f"n{i}", start=2.0).build() for i in range(1, count + 1)),
    )


STEP = 100  # job i's node's placed job: STEP + i


def reports(i: int) -> list[JobReport]:
    """n{i}'s sync: job STEP+i started, job i finished."""
    return [
        JobReport(seq=1, job_id=STEP + i, attempt=0, kind="started", time=5.0),
        JobReport(
            seq=2, job_id=i, attempt=0, kind="finished", time=5.0, state="COMPLETED",
            max_rss_bytes=i << 20, cpu_seconds=float(i),
        ),
    ]  # fmt: skip


def queued(cluster: Cluster, which: Sequence[int]) -> list[BaseException | None]:
    """The nodes' reports applied while the writer is busy (they all queue), answered."""

    async def scenario() -> list[BaseException | None]:
        async with cluster.change():
            tasks = [
                asyncio.create_task(agents.apply_reports(cluster, f"n{i}", reports(i)))
                for i in which
            ]
            await asyncio.sleep(0.01)
            assert len(cluster.reporting) == len(which)
            assert not any(t.done() for t in tasks)  # none answered before it is stored
        return await asyncio.gather(*tasks, return_exceptions=True)

    return asyncio.run(scenario())


def test_reports_queued_together_commit_in_one_transaction(cluster: Cluster) -> None:
    running(cluster)
    transactions = counted(cluster)
    answers = queued(cluster, range(1, 9))
    assert answers == [None] * 8
    assert transactions == [1] and not cluster.reporting
    for i in range(1, 9):
        assert cluster.jobs[i].state is JobState.COMPLETED
        assert cluster.jobs[i].extra["max_rss"] == str(i << 20)
        assert cluster.jobs[STEP + i].launched
    ended = [e.job_id for e in cluster.recent_events if e.kind == "job.finished"]
    assert ended == list(range(1, 9))  # in the order the syncs came


def test_a_batch_longer_than_a_turn_answers_its_syncs_after_its_commit(
    cluster: Cluster,
) -> None:
    """42 syncs queued: their reports are read over two turns of the loop (32 a turn),
    committed in one transaction; no sync is answered, nor its jobs mirrored, before
    that commit writes them."""
    count = agents.YIELD_EVERY_SYNCS + 10  # more than one turn's worth
    running(cluster, count)
    transactions = counted(cluster)
    tasks: list[asyncio.Task[None]] = []
    at_commit: list[tuple[int, int, int]] = []  # jobs written, syncs answered, ended

    def writing(jobs: Sequence[Job], *_: Any) -> None:
        answered = sum(t.done() for t in tasks)
        ended = sum(cluster.jobs[i].state is JobState.COMPLETED for i in range(1, count + 1))
        at_commit.append((len(jobs), answered, ended))

    intercept(cluster, "update_jobs", writing)

    async def scenario() -> list[BaseException | None]:
        async with cluster.change():
            for i in range(1, count + 1):
                tasks.append(
                    asyncio.create_task(agents.apply_reports(cluster, f"n{i}", reports(i)))
                )
            await asyncio.sleep(0.01)
        return await asyncio.gather(*tasks, return_exceptions=True)

    assert asyncio.run(scenario()) == [None] * count
    assert at_commit == [(2 * count, 0, 0)]  # every job in one write, before any answer
    assert transactions == [1]
    assert all(cluster.jobs[i].state is JobState.COMPLETED for i in range(1, count + 1))


def test_an_outage_fails_every_sync_of_the_batch_and_acknowledges_none(
    cluster: Cluster,
) -> None:
    running(cluster)

    async def scenario() -> list[AgentInstructions]:
        for name in NODES[:3]:
            await agents.register(cluster, AgentRegister(node=name, cpus=2, memory_bytes=1 << 30))
        down(cluster)
        async with cluster.change():
            tasks = [
                asyncio.create_task(
                    agents.sync(cluster, f"n{i}", AgentSync(reports=reports(i), running=[STEP + i]))
                )
                for i in (1, 2, 3)
            ]
            await asyncio.sleep(0.01)
            assert len(cluster.reporting) == 3
        return await asyncio.gather(*tasks)

    replies = asyncio.run(scenario())
    assert [r.acked_seq for r in replies] == [0, 0, 0]  # each agent sends them again
    for i in (1, 2, 3):
        assert cluster.jobs[i].state is JobState.RUNNING
        assert not cluster.jobs[STEP + i].launched


def test_a_row_the_store_refuses_fails_only_its_own_sync(cluster: Cluster) -> None:
    running(cluster)
    refuse(cluster, 2)
    answers = queued(cluster, [1, 2, 3])
    assert answers[0] is None and answers[2] is None
    assert isinstance(answers[1], ValueError)
    assert [cluster.jobs[i].state for i in (1, 2, 3)] == [
        JobState.COMPLETED,
        JobState.RUNNING,
        JobState.COMPLETED,
    ]


def down(cluster: Cluster) -> None:
    """The store refuses every transaction, as a database that is down."""

    def transaction() -> Any:
        raise DatabaseUnavailable("connection refused")

    cluster.store.transaction = transaction  # type: ignore[method-assign]


def refuse(cluster: Cluster, job_id: int) -> None:
    """The store refuses any transaction that writes job ``job_id``."""

    def check(jobs: Sequence[Job], *_: Any) -> None:
        if any(j.id == job_id for j in jobs):
            raise ValueError(f"job {job_id} refused")

    intercept(cluster, "update_jobs", check)


def test_a_sync_cancelled_while_it_waits_leaves_the_queue(cluster: Cluster) -> None:
    """A request cancelled while its reports wait for the writer takes them out of the
    queue: the next batch commits only the reports someone still waits for."""
    running(cluster)
    count = counted(cluster)

    async def scenario() -> BaseException | None:
        async with cluster.change():
            gone = asyncio.create_task(agents.apply_reports(cluster, "n1", reports(1)))
            kept = asyncio.create_task(agents.apply_reports(cluster, "n2", reports(2)))
            await asyncio.sleep(0.01)
            gone.cancel()
            await asyncio.sleep(0.01)
            assert [w.node for w in cluster.reporting] == ["n2"]
        answers = await asyncio.gather(gone, kept, return_exceptions=True)
        assert isinstance(answers[0], asyncio.CancelledError)
        return answers[1]

    assert asyncio.run(scenario()) is None
    assert count == [1]
    assert not cluster.reporting
    assert cluster.jobs[2].state is JobState.COMPLETED and cluster.jobs[STEP + 2].launched
    assert cluster.jobs[1].state is JobState.RUNNING and not cluster.jobs[STEP + 1].launched
