"""GPU jobs get GPUs from one NVLink island (best fit among islands), and
``--topology required=nvlink`` never splits a job's GPUs on a node across islands."""

from __future__ import annotations

from hal.core.states import PendingReason as R
from hal.scheduler.framework import Scheduler
from hal.scheduler.plugins import build_scheduler
from hal.testing import ClusterBuilder, allocations, cluster, make_job, make_node, reasons

N = make_node
J = make_job

TWO_QUADS = ((0, 1, 2, 3), (4, 5, 6, 7))


def test_a_job_gets_the_fullest_island_that_fits(sched: Scheduler) -> None:
    """GPUs 0, 1 busy: island A has 2 free, B has 4. A 2-GPU job takes A's last two
    (best fit), leaving B whole for a 4-GPU job in the same pass."""
    snap = (
        cluster()
        .nodes(N("g").gpus(8).islands(*TWO_QUADS))
        .running(J(9).gpus(2).running_on("g", gpu_ids=((0, 1),)))
        .pending(J(1).gpus(2), J(2).gpus(4))
        .build()
    )
    allocs = allocations(sched.schedule(snap))
    assert allocs[1].gpu_ids == ((2, 3),)
    assert allocs[2].gpu_ids == ((4, 5, 6, 7),)


def test_without_islands_the_lowest_free_gpus_are_taken(sched: Scheduler) -> None:
    snap = (
        cluster()
        .nodes(N("g").gpus(8))
        .running(J(9).gpus(2).running_on("g", gpu_ids=((0, 4),)))
        .pending(J(1).gpus(3))
        .build()
    )
    assert allocations(sched.schedule(snap))[1].gpu_ids == ((1, 2, 3),)


def _split_only() -> ClusterBuilder:
    """Islands A and B with 2 free GPUs each (0, 1 and 4, 5 busy)."""
    return (
        cluster()
        .nodes(N("g").gpus(8).islands(*TWO_QUADS))
        .running(J(9).gpus(4).running_on("g", gpu_ids=((0, 1, 4, 5),)))
    )


def test_a_job_may_span_islands_unless_it_requires_one(sched: Scheduler) -> None:
    snap = _split_only().pending(J(1).gpus(4)).build()
    assert allocations(sched.schedule(snap))[1].gpu_ids == ((2, 3, 6, 7),)

    snap = _split_only().pending(J(1).gpus(4).topology("nvlink", required=True)).build()
    plan = sched.schedule(snap)
    assert allocations(plan) == {}
    assert reasons(plan) == {1: R.RESOURCES}


def test_required_nvlink_picks_the_node_whose_island_fits(sched: Scheduler) -> None:
    """Node a has 4 free GPUs in two islands, node b 4 free in one: the job goes to b."""
    snap = (
        cluster()
        .nodes(N("a").gpus(8).islands(*TWO_QUADS), N("b").gpus(8).islands(*TWO_QUADS))
        .running(
            J(8).gpus(4).running_on("a", gpu_ids=((0, 1, 4, 5),)),
            J(9).gpus(4).running_on("b", gpu_ids=((0, 1, 2, 3),)),
        )
        .pending(J(1).gpus(4).topology("nvlink", required=True))
        .build()
    )
    alloc = allocations(sched.schedule(snap))[1]
    assert (alloc.nodes, alloc.gpu_ids) == (("b",), ((4, 5, 6, 7),))


def test_a_job_larger_than_every_island_is_refused(sched: Scheduler) -> None:
    snap = (
        cluster()
        .nodes(N("g").gpus(8).islands(*TWO_QUADS))
        .pending(J(1).gpus(6).topology("nvlink", required=True), J(2).gpus(6))
        .build()
    )
    plan = sched.schedule(snap)
    assert reasons(plan, [1]) == {1: R.BAD_CONSTRAINTS}
    assert allocations(plan)[2].gpu_ids == ((0, 1, 2, 3, 4, 5),)  # no requirement: split


def test_jobs_alike_but_for_the_requirement_are_judged_apart(sched: Scheduler) -> None:
    """The pass reuses a failed fit for jobs of one placement key: the requirement must
    be part of it, or the free job would wait behind the bound one's verdict."""
    snap = (
        _split_only().pending(J(1).gpus(4).topology("nvlink", required=True), J(2).gpus(4)).build()
    )
    plan = sched.schedule(snap)
    assert 2 in allocations(plan) and 1 not in allocations(plan)


def test_a_waiting_required_nvlink_job_gets_a_backfill_start() -> None:
    """Backfill plans on tables of future free counts whose GPU-id map is today's: a node
    all of whose GPUs are free by then has its whole islands free, so the job that waits
    for an island is given a start once the running job ends (1090; backfill rounds to
    its 60 s resolution)."""
    snap = (
        cluster(1000.0)
        .nodes(N("g").gpus(8).islands(*TWO_QUADS))
        .running(J(9).gpus(4).limit(100).running_on("g", start=990.0, gpu_ids=((0, 1, 4, 5),)))
        .pending(J(1).gpus(3).limit(60).topology("nvlink", required=True))
        .build()
    )
    (update,) = build_scheduler().schedule(snap).updates
    assert update.reason is R.RESOURCES
    assert update.expected_start is not None and 1090.0 <= update.expected_start <= 1150.0


def _a_split_b_whole() -> ClusterBuilder:
    """Node a (listed first, fuller: best fit's pick) has 4 free GPUs split 2 + 2 over
    its islands; node b has a whole island free."""
    return (
        cluster()
        .nodes(N("a").gpus(8).islands(*TWO_QUADS), N("b").gpus(8).islands(*TWO_QUADS))
        .running(
            J(8).gpus(4).cpus(4).running_on("a", gpu_ids=((0, 1, 4, 5),)),
            J(9).gpus(4).running_on("b", gpu_ids=((0, 1, 2, 3),)),
        )
    )


def test_a_gpu_job_prefers_a_node_whose_island_fits(sched: Scheduler) -> None:
    """Without --topology, a 4-GPU job goes to the node that can give it one island
    (b), not to the fuller node that would split it (a), as Kubernetes' topology
    manager best-effort and Slurm's GRES link affinity would."""
    plan = sched.schedule(_a_split_b_whole().pending(J(1).gpus(4)).build())
    alloc = allocations(plan)[1]
    assert (alloc.nodes, alloc.gpu_ids) == (("b",), ((4, 5, 6, 7),))


def test_the_island_preference_never_keeps_a_job_waiting(sched: Scheduler) -> None:
    """Two 4-GPU jobs: the first takes b's island, the second gets a's split GPUs
    rather than waiting (a preference, not a requirement)."""
    plan = sched.schedule(_a_split_b_whole().pending(J(1).gpus(4), J(2).gpus(4)).build())
    allocs = allocations(plan)
    assert (allocs[1].nodes, allocs[2].nodes) == (("b",), ("a",))
    assert allocs[2].gpu_ids == ((2, 3, 6, 7),)


def test_the_island_preference_outranks_best_fit_per_node_of_a_multinode_job(
    sched: Scheduler,
) -> None:
    """A 2-node job of 4 GPUs per node on three nodes, the fullest of which (a) would
    split: it gets b and c, whose islands fit."""
    snap = (
        cluster()
        .nodes(*(N(x).gpus(8).islands(*TWO_QUADS) for x in "abc"))
        .running(
            J(7).gpus(4).cpus(4).running_on("a", gpu_ids=((0, 1, 4, 5),)),
            J(8).gpus(4).running_on("b", gpu_ids=((0, 1, 2, 3),)),
        )
        .pending(J(1).nodes(2).gpus(4))
        .build()
    )
    assert allocations(sched.schedule(snap))[1].nodes == ("b", "c")
