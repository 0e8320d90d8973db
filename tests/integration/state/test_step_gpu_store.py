"""What ended steps did with their GPUs, kept in accounting on real SQLite and
PostgreSQL (``job_steps`` GPU columns, migration 16): a step's record round-trips its
tasks' most GPU memory and utilisation and their means; a database from before keeps
its steps, read as not read for GPUs; a step ends with the GPU use its nodes reported,
across a server restart between two nodes' ends."""

from __future__ import annotations

import asyncio

from test_step_usage_store import ANN, step_row_at_version, two_node_job

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.slurm.steps import StepRequest
from hal.state.cluster import Cluster
from hal.state.migrations import STEPS
from hal.state.steps import StepTable
from hal.state.store import SqlStateStore, StepRow
from hal.wire.agent import StepEnd
from hal.wire.jobs import GpuUsage
from hal.wire.steps import TaskTotals

GiB = 1 << 30
GPU = ("gpu_max_mem_bytes", "gpu_ave_mem_bytes", "gpu_max_util", "gpu_ave_util")


def test_a_step_record_keeps_its_gpu_use(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    row = StepRow(
        7, 0, "train", "n[1-2]", 2, "COMPLETED", 0, 1.0, 9.0, 0, 1 << 20, "n1", 0, 1 << 20, 2.0,
        gpu_max_mem_bytes=3 * GiB, gpu_ave_mem_bytes=2 * GiB, gpu_max_util=95, gpu_ave_util=72.5
    )  # fmt: skip
    plain = StepRow(7, 1, "hostname", "n1", 1, "COMPLETED", 0, 1.0, 2.0)
    store.record_step(row)
    store.record_step(plain)
    assert store.steps_of([7]) == [row, plain]
    assert [getattr(plain, c) for c in GPU] == [None] * 4  # no GPUs: none, not zeros
    store.close()


def test_a_database_from_before_keeps_its_steps_as_not_read_for_gpus(db_url: str) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    step_row_at_version(store, 15, GPU)  # before migration 16's GPU columns
    assert store.migrate() == len(STEPS)
    (old,) = store.steps_of([7])
    assert (old.name, old.end_time) == ("a.out", 2.0)
    assert [getattr(old, c) for c in GPU] == [None] * 4
    store.close()


def gpu_end(job_id: int, *tasks: tuple[int, int, int, float]) -> StepEnd:
    """A node's end: each task's (rank, most GPU memory, most util, mean util)."""
    return StepEnd(
        job_id=job_id,
        step_id=0,
        exit_code=0,
        tasks=[
            TaskTotals(
                rank=r,
                max_rss_bytes=1 << 20,
                cpu_seconds=1.0,
                gpu=GpuUsage(mem_bytes=0, max_mem_bytes=m, util=0, max_util=u, ave_util=a),
            )
            for r, m, u, a in tasks
        ],
    )


def test_a_step_ends_with_its_nodes_gpu_use_across_a_server_restart(db_url: str) -> None:
    """Ranks 0-1 on n1, 2-3 on n2: n1 ends, the server restarts, n2 ends. The record
    has the most of one task over both nodes and the mean of all four."""

    async def main() -> None:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(1000.0))
        await cluster.load()
        try:
            job_id = await two_node_job(cluster)
            table = StepTable(cluster)
            step = await table.create(job_id, ANN, StepRequest(), ["train"], {})
            assert step.layout.tasks == (2, 2)
            first = gpu_end(job_id, (0, 1 * GiB, 70, 60.0), (1, 3 * GiB, 50, 40.0))
            await table.received("n1", [], [first])
            restarted = StepTable(cluster)
            assert await restarted.restore() == 1
            second = gpu_end(job_id, (2, 2 * GiB, 95, 90.0), (3, 2 * GiB, 10, 10.0))
            await restarted.received("n2", [], [second])
            (row,) = await cluster.db(cluster.store.steps_of, [job_id])
            assert [getattr(row, c) for c in GPU] == [3 * GiB, 2 * GiB, 95, 50.0]
        finally:
            await cluster.close()

    asyncio.run(main())


def test_a_step_without_gpu_figures_records_none(db_url: str) -> None:
    async def main() -> None:
        cluster = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(1000.0))
        await cluster.load()
        try:
            job_id = await two_node_job(cluster)
            table = StepTable(cluster)
            await table.create(job_id, ANN, StepRequest(), ["hostname"], {})
            for node, ranks in (("n1", (0, 1)), ("n2", (2, 3))):
                tasks = [TaskTotals(rank=r, max_rss_bytes=1 << 20) for r in ranks]
                await table.received(
                    node, [], [StepEnd(job_id=job_id, step_id=0, exit_code=0, tasks=tasks)]
                )
            (row,) = await cluster.db(cluster.store.steps_of, [job_id])
            assert row.max_rss_bytes == 1 << 20
            assert [getattr(row, c) for c in GPU] == [None] * 4
        finally:
            await cluster.close()

    asyncio.run(main())
