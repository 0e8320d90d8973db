"""The EligibleTime users see (``Job.shown_eligible_time``): a pending job's begin time
while it is ahead, as Slurm's; otherwise when the job was made eligible."""

from __future__ import annotations

import pytest

from hal.core.states import JobState
from hal.testing.builders import make_job


@pytest.mark.parametrize(
    ("begin", "state", "eligible", "now", "shown"),
    [
        (500.0, JobState.PENDING, None, 100.0, 500.0),  # ahead: eligible then
        (500.0, JobState.PENDING, 50.0, 100.0, 500.0),  # ahead even after a release
        (50.0, JobState.PENDING, None, 100.0, None),  # come: as recorded
        (500.0, JobState.PENDING, None, 500.0, None),  # its moment is not ahead
        (None, JobState.PENDING, 70.0, 100.0, 70.0),  # released from a hold at 70
        (500.0, JobState.CANCELLED, None, 100.0, None),  # ended before: never eligible
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
