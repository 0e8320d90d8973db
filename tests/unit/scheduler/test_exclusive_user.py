"""exclusiveuser: ``--exclusive=user`` (Slurm's OverSubscribe=USER) keeps other users'
jobs and a job with it apart, both ways round, against running jobs and within a pass."""

from __future__ import annotations

import pytest

from hal.core.states import PendingReason as R
from hal.scheduler.framework import Scheduler
from hal.testing import JobBuilder, cluster, make_job, make_node, placed_nodes, reasons

N = make_node


def J(job_id: int, user: str = "alice") -> JobBuilder:
    return make_job(job_id).user(user)


# (situation, running jobs, pending job, expected nodes or reason); nodes a and b, 4 CPUs
CASES: list[tuple[str, list[JobBuilder], JobBuilder, tuple[str, ...] | R]] = [
    (
        "shares a node with the same user's job",
        [J(9).running_on("a")],
        J(1).exclusive_user().nodes(1),
        ("a",),
    ),
    (
        "keeps off a node another user's job holds",
        [J(9, "bob").running_on("a")],
        J(1).exclusive_user(),
        ("b",),
    ),
    (
        "waits for Resources while other users hold every node",
        [J(9, "bob").running_on("a"), J(8, "carol").running_on("b")],
        J(1).exclusive_user(),
        R.RESOURCES,
    ),
    (
        "another user's job keeps off its node",
        [J(9).exclusive_user().running_on("a")],
        J(1, "bob"),
        ("b",),
    ),
    (
        "the same user's job may join it",
        [J(9).exclusive_user().running_on("a")],
        J(1).cpus(3),
        ("a",),
    ),
    (
        "another user's job waits when it holds every node",
        [J(9).exclusive_user().running_on("a"), J(8).exclusive_user().running_on("b")],
        J(1, "bob"),
        R.RESOURCES,
    ),
    (
        "two users' --exclusive=user jobs never meet",
        [J(9, "bob").exclusive_user().running_on("a")],
        J(1).exclusive_user(),
        ("b",),
    ),
]


@pytest.mark.parametrize(
    ("situation", "running", "job", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_exclusive_user(
    sched: Scheduler,
    situation: str,
    running: list[JobBuilder],
    job: JobBuilder,
    expected: tuple[str, ...] | R,
) -> None:
    """One pending job against two 4-CPU nodes: where it lands, or why it waits."""
    snap = cluster().nodes(N("a").cpus(4), N("b").cpus(4)).running(*running)
    plan = sched.schedule(snap.pending(job.build()).build())
    if isinstance(expected, R):
        assert placed_nodes(plan) == {}
        assert reasons(plan) == {1: expected}
    else:
        assert placed_nodes(plan) == {1: expected}


def test_jobs_placed_in_one_pass_stay_apart(sched: Scheduler) -> None:
    """Alice's --exclusive=user job placed first in a pass keeps Bob's next job off its
    node, and Bob's job then keeps Alice's second --exclusive=user job off the other: one
    node only has room for one 1-CPU job each, yet nobody shares."""
    snap = (
        cluster()
        .nodes(N("a").cpus(4), N("b").cpus(4))
        .pending(
            J(1).exclusive_user().priority(30),
            J(2, "bob").priority(20),
            J(3).exclusive_user().priority(10),
        )
        .build()
    )
    placed = placed_nodes(sched.schedule(snap))
    assert placed[1] != placed[2]
    assert placed[3] == placed[1]


def test_one_users_failure_is_not_reused_for_another(sched: Scheduler) -> None:
    """Bob's job that cannot go on Alice's --exclusive=user node waits; Alice's job of
    the very same shape, later in the same pass, still starts there (the pass must not
    reuse Bob's failed fit for jobs of the same shape)."""
    snap = (
        cluster()
        .nodes(N("a").cpus(4))
        .running(J(9).exclusive_user().running_on("a"))
        .pending(J(1, "bob").priority(20), J(2).priority(10))
        .build()
    )
    plan = sched.schedule(snap)
    assert placed_nodes(plan) == {2: ("a",)}
    assert reasons(plan, [1]) == {1: R.RESOURCES}
