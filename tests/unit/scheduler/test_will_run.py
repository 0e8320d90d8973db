"""will_run (sbatch --test-only) and test_only: earliest start from running jobs'
expected ends (start + time limit; unlimited never ends)."""

from __future__ import annotations

from hal.core.states import PendingReason as R
from hal.scheduler.framework import Scheduler, Status, WillRunResult
from hal.testing import cluster, make_job, make_node

J = make_job
NOW = 1_000_000.0


def test_fits_now_starts_now(sched: Scheduler) -> None:
    """An idle node: the job would start at the snapshot's now."""
    snap = cluster(NOW).nodes(make_node("a")).build()
    result = sched.will_run(snap, J(1).build())
    assert isinstance(result, WillRunResult)
    assert (result.start_time, result.nodes) == (NOW, ("a",))


def test_starts_when_the_earliest_blocker_ends(sched: Scheduler) -> None:
    """Two busy nodes; the one whose job ends first (in 600 s) is where it starts."""
    snap = (
        cluster(NOW)
        .nodes(make_node("a").cpus(1), make_node("b").cpus(1))
        .running(
            J(8).running_on("a", start=NOW - 100).limit(3600),
            J(9).running_on("b", start=NOW - 3000).limit(3600),
        )
        .build()
    )
    result = sched.will_run(snap, J(1).build())
    assert isinstance(result, WillRunResult)
    assert (result.start_time, result.nodes) == (NOW + 600, ("b",))


def test_multi_node_waits_for_enough_ends(sched: Scheduler) -> None:
    """A 2-node job waits for the later of the two ends."""
    snap = (
        cluster(NOW)
        .nodes(make_node("a").cpus(1), make_node("b").cpus(1))
        .running(
            J(8).running_on("a", start=NOW).limit(100),
            J(9).running_on("b", start=NOW).limit(500),
        )
        .build()
    )
    result = sched.will_run(snap, J(1).nodes(2).build())
    assert isinstance(result, WillRunResult)
    assert result.start_time == NOW + 500


def test_unlimited_running_job_never_ends(sched: Scheduler) -> None:
    """Only node busy with an unlimited job: no start time, reason Resources."""
    snap = cluster(NOW).nodes(make_node("a").cpus(1)).running(J(8).running_on("a").limit(0)).build()
    result = sched.will_run(snap, J(1).build())
    assert isinstance(result, Status)
    assert result.reason is R.RESOURCES


def test_overdue_job_frees_its_node_now_not_before(sched: Scheduler) -> None:
    """A job past its limit is about to be killed: start estimate is now."""
    snap = (
        cluster(NOW)
        .nodes(make_node("a").cpus(1))
        .running(J(8).running_on("a", start=NOW - 7200).limit(3600))
        .build()
    )
    result = sched.will_run(snap, J(1).build())
    assert isinstance(result, WillRunResult)
    assert result.start_time == NOW
    # ...but it does not fit *now*, so test-only says Resources.
    assert isinstance(sched.test_only(snap, J(1).build()), Status)


def test_begin_time_is_respected(sched: Scheduler) -> None:
    """--begin an hour ahead on an idle cluster: the estimate is the begin time."""
    snap = cluster(NOW).nodes(make_node("a")).build()
    result = sched.will_run(snap, J(1).begin(NOW + 3600).build())
    assert isinstance(result, WillRunResult)
    assert result.start_time == NOW + 3600


def test_impossible_job_is_reported(sched: Scheduler) -> None:
    """More CPUs than any node: BadConstraints, as sbatch --test-only would refuse."""
    snap = cluster(NOW).nodes(make_node("a")).build()
    result = sched.will_run(snap, J(1).cpus(64).build())
    assert isinstance(result, Status)
    assert result.reason is R.BAD_CONSTRAINTS


def test_held_job_has_no_start(sched: Scheduler) -> None:
    """A held job cannot be estimated: the hold reason comes back."""
    snap = cluster(NOW).nodes(make_node("a")).build()
    result = sched.will_run(snap, J(1).hold().build())
    assert isinstance(result, Status)
    assert result.reason is R.JOB_HELD_USER


def test_will_run_does_not_change_the_snapshot_pass(sched: Scheduler) -> None:
    """A what-if run leaves no trace: the next pass still sees the node free."""
    snap = cluster(NOW).nodes(make_node("a").cpus(1)).pending(J(2)).build()
    sched.will_run(snap, J(1).build())
    assert [p.job_id for p in sched.schedule(snap).placements] == [2]
