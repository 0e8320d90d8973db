"""A job's cloud cost follows its runs (hal.core.cloud_costs): a start on priced nodes
keeps their rate, a requeue keeps the ended run's cost in ``job_runs`` (sacct -D gives
each run its own), and a later start on unpriced nodes drops the rate. The autoscaler's
``CloudBudget`` reason survives the scheduler's passes while the job finds no room, and
the job still starts when a node frees up."""

from __future__ import annotations

import asyncio

from hal.api.convert import job_info
from hal.compat.sacct_runs import records
from hal.core.clock import VirtualClock
from hal.core.cloud_costs import RATE
from hal.core.job import Allocation
from hal.core.resources import ResourceVector
from hal.core.states import JobState, PendingReason
from hal.scheduler.framework.snapshot import PendingUpdate, Placement, Plan
from hal.state.advisory import set_pending_reasons
from hal.state.cluster import Cluster
from hal.state.job_changes import requeued
from hal.testing import make_job
from hal.testing.mirror import commit, store
from hal.wire.jobs import JobRun

ON_N1 = Allocation(("n1",), (ResourceVector(cpus=1),))


def start(cluster: Cluster, job_id: int) -> None:
    plan = Plan(revision=0, placements=(Placement(job_id, ON_N1),))
    assert asyncio.run(cluster.apply_plan(plan)) == [job_id]


def test_each_run_keeps_its_own_cost(clock: VirtualClock, cluster: Cluster) -> None:
    store(cluster, make_job(1).build())
    cluster.set_cloud_price(["n1"], 0.5)
    start(cluster, 1)
    assert cluster.jobs[1].extra[RATE] == "0.5"
    clock.advance(1800)
    assert job_info(cluster.jobs[1], cluster).cost == 0.25  # so far, while it runs
    asyncio.run(commit(cluster, [requeued(cluster.jobs[1], clock.now())]))
    (run,) = cluster.store.runs_of([1])
    assert run.attempt == 0 and run.cost == 0.25
    cluster.set_cloud_price(["n1"], 0.0)  # an owned node now: the next run costs nothing
    start(cluster, 1)
    assert RATE not in cluster.jobs[1].extra
    info = job_info(cluster.jobs[1], cluster)
    assert info.cost is None
    info.runs = [JobRun(attempt=0, state="REQUEUED", exit_code=0, partition="batch",
                        submit_time=0.0, end_time=run.end_time, cost=run.cost)]  # fmt: skip
    earlier, latest = records(info, duplicates=True)
    assert (earlier.cost, latest.cost) == (0.25, None)


def test_cloud_budget_stays_until_the_job_can_start(cluster: Cluster) -> None:
    store(cluster, make_job(1).build().evolve(reason=PendingReason.RESOURCES))
    asyncio.run(set_pending_reasons(cluster, {1: PendingReason.CLOUD_BUDGET}))
    assert cluster.jobs[1].reason is PendingReason.CLOUD_BUDGET
    # the scheduler's pass finds no room: the autoscaler's reason says more, and stays
    update = Plan(revision=0, updates=(PendingUpdate(1, PendingReason.RESOURCES, None),))
    asyncio.run(cluster.apply_plan(update))
    assert cluster.jobs[1].reason is PendingReason.CLOUD_BUDGET
    # a reason of another kind (a dependency, a hold) takes its place
    other = Plan(revision=0, updates=(PendingUpdate(1, PendingReason.DEPENDENCY, None),))
    asyncio.run(cluster.apply_plan(other))
    assert cluster.jobs[1].reason is PendingReason.DEPENDENCY
    # the autoscaler gives Resources back only where its own reason stands
    asyncio.run(set_pending_reasons(cluster, {1: PendingReason.RESOURCES}))
    assert cluster.jobs[1].reason is PendingReason.DEPENDENCY
    asyncio.run(set_pending_reasons(cluster, {1: PendingReason.CLOUD_BUDGET}))
    start(cluster, 1)  # an owned node freed up: it starts there
    assert cluster.jobs[1].state is JobState.RUNNING
