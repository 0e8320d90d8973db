"""PreFilter plugins that judge a job on its own: hold, begin time, partition state and
limits, array throttle. None of these hold back the jobs behind."""

from __future__ import annotations

import pytest

from hal.core.states import JobState, PartitionState
from hal.core.states import PendingReason as R
from hal.scheduler.framework import Scheduler
from hal.testing import (
    ClusterBuilder,
    JobBuilder,
    cluster,
    make_job,
    make_node,
    placed_nodes,
    reasons,
)

J = make_job
NOW = 1_000_000.0

# (situation, job, expected reason or None when it starts)
CASES: list[tuple[str, JobBuilder, R | None]] = [
    ("sbatch -H holds the job", J(1).hold(), R.JOB_HELD_USER),
    ("an operator hold", J(1).admin_hold(), R.JOB_HELD_ADMIN),
    ("an admin hold is reported before a user hold", J(1).hold().admin_hold(), R.JOB_HELD_ADMIN),
    ("--begin in the future", J(1).begin(NOW + 60), R.BEGIN_TIME),
    ("--begin in the past is fine", J(1).begin(NOW - 60), None),
    ("--begin exactly now is fine", J(1).begin(NOW), None),
    ("partition down", J(1).partition("down"), R.PARTITION_DOWN),
    (
        "partition inactive (scontrol update State=INACTIVE)",
        J(1).partition("inactive"),
        R.PARTITION_INACTIVE,
    ),
    ("a drained partition still starts its queued jobs", J(1).partition("drain"), None),
    (
        "time limit above the partition max",
        J(1).partition("short").limit(7200),
        R.PARTITION_TIME_LIMIT,
    ),
    (
        "unlimited time in a limited partition",
        J(1).partition("short").limit(0),
        R.PARTITION_TIME_LIMIT,
    ),
    ("time limit within the partition max", J(1).partition("short").limit(3600), None),
    (
        "more nodes than the partition allows",
        J(1).partition("small").nodes(2),
        R.PARTITION_NODE_LIMIT,
    ),
    ("an unknown partition", J(1).partition("nope"), R.BAD_CONSTRAINTS),
]


def _cluster() -> ClusterBuilder:
    return (
        cluster(NOW)
        .nodes(make_node("a"), make_node("b"))
        .partition("batch", default=True)
        .partition("down", state=PartitionState.DOWN)
        .partition("inactive", state=PartitionState.INACTIVE)
        .partition("drain", state=PartitionState.DRAIN)
        .partition("short", max_time_s=3600)
        .partition("small", max_nodes=1)
    )


@pytest.mark.parametrize(("situation", "job", "expected"), CASES, ids=[c[0] for c in CASES])
def test_job_level_reason(
    sched: Scheduler, situation: str, job: JobBuilder, expected: R | None
) -> None:
    """The job's own constraint decides its reason."""
    snap = _cluster().pending(job).build()
    plan = sched.schedule(snap)
    if expected is None:
        assert 1 in placed_nodes(plan)
    else:
        assert reasons(plan) == {1: expected}


@pytest.mark.parametrize(
    "blocker",
    [
        J(1).hold(),
        J(1).begin(NOW + 60),
        J(1).partition("short").limit(0),
        J(1).depends("afterok:77"),
    ],
    ids=["held", "begin", "limit", "dependency"],
)
def test_own_constraints_do_not_block_others(sched: Scheduler, blocker: JobBuilder) -> None:
    """A high-priority job that waits for its own reason lets the next one start."""
    snap = (
        _cluster()
        .pending(blocker.priority(100), J(2).priority(1))
        .related(J(77).state(JobState.RUNNING))
        .build()
    )
    plan = sched.schedule(snap)
    assert 2 in placed_nodes(plan)
    assert 1 not in placed_nodes(plan)


ARRAY_CASES: list[tuple[str, int, int, int]] = [
    # (situation, limit, elements already running, expected to start now)
    ("%2 with none running starts two", 2, 0, 2),
    ("%2 with one running starts one", 2, 1, 1),
    ("%2 with two running starts none", 2, 2, 0),
    ("no limit starts all that fit", 0, 0, 5),
]


@pytest.mark.parametrize(
    ("situation", "limit", "running", "starts"), ARRAY_CASES, ids=[c[0] for c in ARRAY_CASES]
)
def test_array_throttle(
    sched: Scheduler, situation: str, limit: int, running: int, starts: int
) -> None:
    """--array=0-N%limit: running plus placed-this-pass never exceeds the limit; the rest
    wait with JobArrayTaskLimit."""
    elements = [J(100 + i).array(100, i, limit) for i in range(running, running + 5)]
    busy = [J(100 + i).array(100, i, limit).running_on("a") for i in range(running)]
    snap = cluster().nodes(make_node("a").cpus(64)).running(*busy).pending(*elements).build()
    plan = sched.schedule(snap)
    assert len(plan.placements) == starts
    waiting = set(reasons(plan).values())
    assert waiting == (set() if starts == 5 else {R.JOB_ARRAY_TASK_LIMIT})


def test_array_throttle_counts_only_its_own_array(sched: Scheduler) -> None:
    """Another array's running elements do not count against this array's %1."""
    snap = (
        cluster()
        .nodes(make_node("a"))
        .running(J(50).array(49, 0, 1).running_on("a"))
        .pending(J(101).array(100, 0, 1))
        .build()
    )
    assert 101 in placed_nodes(sched.schedule(snap))


def test_a_begin_time_is_the_expected_start(sched: Scheduler) -> None:
    """squeue --start shows a --begin job's begin time, as Slurm does."""
    snap = _cluster().pending(J(1).begin(NOW + 600), J(2).begin(NOW - 60)).build()
    plan = sched.schedule(snap)
    updates = {u.job_id: u for u in plan.updates}
    assert updates[1].reason is R.BEGIN_TIME and updates[1].expected_start == NOW + 600
    assert 2 not in updates and placed_nodes(plan).keys() == {2}


def test_a_begin_time_no_date_can_show_still_gives_a_reason(sched: Scheduler) -> None:
    """A begin time past the year 9999 (the API refuses it now; stored ones may exist)
    pends with BeginTime and its number, instead of the pass failing on the date."""
    snap = _cluster().pending(J(1).begin(1e300)).build()
    result = sched.run_pass(snap)
    assert {u.job_id: u.reason for u in result.plan.updates} == {1: R.BEGIN_TIME}
    assert result.statuses[1].message == "may not start before 1e+300 (Unix seconds)"
