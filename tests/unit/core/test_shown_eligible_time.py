"""The EligibleTime users see (``Job.shown_eligible_time``): a pending job's begin time
while it is ahead, as Slurm's; once it is eligible, when it became so (its submission, its
begin time, its release or its dependency met); ``None`` (Unknown) while it is held or
waits on a dependency."""

from __future__ import annotations

import pytest

from hal.core.states import JobState, PendingReason
from hal.testing.builders import JobBuilder, make_job


@pytest.mark.parametrize(
    ("begin", "state", "eligible", "now", "shown"),
    [
        (500.0, JobState.PENDING, None, 100.0, 500.0),  # ahead: eligible then
        (500.0, JobState.PENDING, 50.0, 100.0, 500.0),  # ahead even after a release
        (50.0, JobState.PENDING, None, 100.0, 50.0),  # come: eligible since its begin
        (500.0, JobState.PENDING, None, 500.0, 500.0),  # its moment is now
        (None, JobState.PENDING, None, 100.0, 10.0),  # plain: eligible since submitted
        (None, JobState.PENDING, 70.0, 100.0, 70.0),  # released from a hold at 70
        (500.0, JobState.CANCELLED, None, 100.0, None),  # ended before: never eligible
        (None, JobState.RUNNING, 40.0, 100.0, 40.0),  # started: as recorded
    ],
)
def test_eligible_time_shown(
    begin: float | None, state: JobState, eligible: float | None, now: float, shown: float | None
) -> None:
    builder = make_job(1).submitted(10.0)
    if begin is not None:
        builder = builder.begin(begin)
    job = builder.build().evolve(state=state, eligible_time=eligible)
    assert job.shown_eligible_time(now) == shown


@pytest.mark.parametrize(
    ("builder", "reason", "eligible", "shown"),
    [
        (make_job(1).hold(), PendingReason.JOB_HELD_USER, None, None),  # sbatch -H
        (make_job(1).admin_hold(), PendingReason.JOB_HELD_ADMIN, None, None),
        (make_job(1).hold(), PendingReason.JOB_HELD_USER, 70.0, None),  # held again
        (make_job(1).depends("afterok:9"), PendingReason.WAITING_FOR_SCHEDULING, None, None),
        (make_job(1).depends("afterok:9"), PendingReason.DEPENDENCY, None, None),
        (make_job(1).depends("afterok:9"), PendingReason.DEPENDENCY, 70.0, None),  # released
        (make_job(1).depends("afterok:9"), PendingReason.DEPENDENCY_NEVER_SATISFIED, None, None),
        (make_job(1).depends("afterok:9"), PendingReason.RESOURCES, 70.0, 70.0),  # met at 70
        (make_job(1).depends("afterok:9"), PendingReason.PRIORITY, None, 10.0),  # met at once
        (make_job(1), PendingReason.JOB_ARRAY_TASK_LIMIT, None, None),  # an array's %N
        (make_job(1), PendingReason.RESOURCES, 70.0, 70.0),  # the throttle let it go at 70
    ],
)
def test_held_or_waiting_on_a_dependency_is_unknown(
    builder: JobBuilder, reason: PendingReason, eligible: float | None, shown: float | None
) -> None:
    """Slurm shows EligibleTime=Unknown while a job is held, its dependency is unmet or
    its array's throttle holds it back; a dependency found met in the job's first pass
    leaves it eligible since submitted. Its waits (priority age, backfill protection)
    count from the same moment: from now while it waits on other jobs."""
    job = builder.submitted(10.0).reason(reason).build().evolve(eligible_time=eligible)
    assert job.shown_eligible_time(100.0) == shown
    if shown is not None:
        assert job.eligible_since(100.0) == shown
    elif reason in (PendingReason.DEPENDENCY, PendingReason.JOB_ARRAY_TASK_LIMIT):
        assert job.eligible_since(100.0) == 100.0
