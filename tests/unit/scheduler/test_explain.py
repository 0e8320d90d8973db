"""``diagnose``: the read-only dry run behind ``hal explain``."""

from __future__ import annotations

from hal.core.job import Job
from hal.core.node import Partition
from hal.core.resources import ResourceVector
from hal.core.states import PendingReason
from hal.scheduler.framework import ClusterSnapshot, Framework, PassContext, Scheduler
from hal.scheduler.framework.explain import diagnose
from hal.testing.builders import make_job, make_node

PARTS = (
    Partition("batch", nodes=("c1", "c2", "c3"), default=True),
    Partition("gpu", nodes=("g1", "g2")),
)


def _snapshot(*running: Job) -> ClusterSnapshot:
    nodes = (
        make_node("c1").cpus(4).build(),
        make_node("c2").cpus(4).build(),
        make_node("c3").cpus(4).down().build(),
        make_node("g1").cpus(8).gpus(4).build(),
        make_node("g2").cpus(8).gpus(4).build(),
    )
    return ClusterSnapshot(
        revision=1,
        now=100.0,
        nodes=nodes,
        partitions=PARTS,
        pending=(),
        running=tuple(running),
    )


def test_nodes_are_counted_once_for_the_first_filter_that_refused_them(sched: Scheduler) -> None:
    """A 4-GPU job in partition gpu while g1 is half taken: three nodes are outside the
    partition, g1 lacks GPUs, g2 is free."""
    busy = (
        make_job(1)
        .gpus(2)
        .partition("gpu")
        .running_on("g1", per_node=ResourceVector(1, 0, 2), gpu_ids=((0, 1),))
        .build()
    )
    snap = _snapshot(busy)
    job = make_job(2).gpus(4).partition("gpu").build()
    diag = diagnose(Framework(sched.profile), PassContext.from_snapshot(snap), job)
    assert diag.nodes_available == 1 and diag.status.is_success
    assert diag.rejections == (
        ("partition", "not in partition gpu", 3),
        ("noderesources", "insufficient gpu", 1),
    )
    assert diag.summary() == "1/5 nodes available: 3 not in partition gpu, 1 insufficient gpu"


def test_a_job_that_cannot_start_says_resources_and_why_per_node(sched: Scheduler) -> None:
    busy = make_job(1).cpus(4).running_on("c1").build()
    snap = _snapshot(busy)
    job = make_job(2).cpus(4).build()
    diag = diagnose(Framework(sched.profile), PassContext.from_snapshot(snap), job)
    assert diag.nodes_available == 1  # c2
    job3 = make_job(3).cpus(4).nodes(2).build()
    diag3 = diagnose(Framework(sched.profile), PassContext.from_snapshot(snap), job3)
    assert not diag3.status.is_success and diag3.status.reason is PendingReason.RESOURCES
    assert diag3.rejections == (
        ("partition", "not in partition batch", 2),
        ("noderesources", "down or drained", 1),
        ("noderesources", "insufficient cpu", 1),
    )


def test_a_pre_filter_verdict_stops_the_dry_run(sched: Scheduler) -> None:
    job = make_job(2).begin(10_000.0).build()
    diag = diagnose(Framework(sched.profile), PassContext.from_snapshot(_snapshot()), job)
    assert diag.stopped_at_pre_filter and diag.status.reason is PendingReason.BEGIN_TIME
    assert diag.rejections == () and diag.nodes_available == 0


def test_the_dry_run_leaves_the_table_untouched(sched: Scheduler) -> None:
    snap = _snapshot()
    ctx = PassContext.from_snapshot(snap)
    before = ctx.nodes.free_cpus.copy()
    diag = diagnose(Framework(sched.profile), ctx, make_job(2).cpus(2).build())
    assert diag.status.is_success
    assert (ctx.nodes.free_cpus == before).all()
