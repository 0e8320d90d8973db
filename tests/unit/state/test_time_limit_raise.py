"""A7: who may raise a job's time limit, as Slurm 22.05.8's update_job decides
(docs/slurm-checks.md): its owner while it is pending, up to its partition's
MaxTime; an administrator always; anyone who may update it lowers it."""

from __future__ import annotations

import pytest

from hal.core.errors import PermissionDenied
from hal.core.job import Job
from hal.core.node import Partition
from hal.core.states import JobState
from hal.state.cluster import Caller
from hal.state.job_changes import check_time_limit_update
from hal.testing import make_job

OWNER = Caller("alice", admin=False)
ADMIN = Caller("root", admin=True)
LIMITED = Partition("other", max_time_s=1800)
OPEN = Partition("debug")


def _job(state: JobState = JobState.PENDING, limit: int = 600) -> Job:
    return make_job(1).user("alice").limit(limit).state(state).build()


@pytest.mark.parametrize(
    ("limit", "partition"),
    [(1200, LIMITED), (1800, LIMITED), (300, LIMITED), (0, OPEN), (10**6, OPEN)],
)
def test_the_owner_of_a_pending_job(limit: int, partition: Partition) -> None:
    check_time_limit_update(_job(), limit, OWNER, partition)


@pytest.mark.parametrize("limit", [1860, 0])
def test_not_above_max_time(limit: int) -> None:
    with pytest.raises(PermissionDenied, match="Access/permission denied for job 1: its par"):
        check_time_limit_update(_job(), limit, OWNER, LIMITED)
    check_time_limit_update(_job(), limit, ADMIN, LIMITED)


def test_not_of_a_running_job_but_lowered() -> None:
    running = _job(JobState.RUNNING)
    with pytest.raises(PermissionDenied, match="it is RUNNING"):
        check_time_limit_update(running, 1200, OWNER, OPEN)
    check_time_limit_update(running, 300, OWNER, OPEN)
    check_time_limit_update(running, 1200, ADMIN, OPEN)
