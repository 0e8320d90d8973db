"""``--time-min`` in the mirror: refused above the job's time limit (at submit and by
``scontrol update``), changed only while the job is pending, and a limit backfill
lowered within it is the started job's (stored) until a requeue gives its own back."""

from __future__ import annotations

import asyncio

import pytest

from hal.core.clock import VirtualClock
from hal.core.errors import Conflict, InvalidRequest
from hal.core.job import Allocation, JobSpec
from hal.core.resources import ResourceVector
from hal.core.states import JobState
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.state import commands
from hal.state.cluster import Caller, Cluster, requeued
from hal.testing import make_job
from hal.testing.mirror import new_cluster, store

ALICE = Caller("alice")
ON_N1 = Allocation(("n1",), (ResourceVector(cpus=1),))


def test_a_time_min_above_the_time_limit_is_refused_at_submit(cluster: Cluster) -> None:
    spec = JobSpec(user="alice", script="#!/bin/sh\n", time_limit_s=600, time_min_s=1200)
    with pytest.raises(InvalidRequest, match="Invalid time-min specification"):
        asyncio.run(cluster.submit([spec]))
    (ok,) = asyncio.run(cluster.submit([spec.with_changes(time_min_s=600)]))
    assert cluster.jobs[ok.job_id].spec.time_min_s == 600


def test_update_time_min_of_a_pending_job(cluster: Cluster) -> None:
    store(cluster, make_job(1).limit(3600).time_min(600).build())
    (job,) = asyncio.run(commands.update(cluster, "1", ALICE, time_min_seconds=1800))
    assert job.spec.time_min_s == 1800
    with pytest.raises(InvalidRequest, match="more than the time limit"):
        asyncio.run(commands.update(cluster, "1", ALICE, time_min_seconds=7200))
    with pytest.raises(InvalidRequest, match="more than the time limit"):
        asyncio.run(commands.update(cluster, "1", ALICE, time_limit_seconds=900))  # below it
    (cleared,) = asyncio.run(commands.update(cluster, "1", ALICE, time_min_seconds=0))
    assert cleared.spec.time_min_s is None


def test_the_time_min_of_a_started_job_stays(cluster: Cluster) -> None:
    store(cluster, make_job(1).limit(3600).time_min(600).running_on("n1", start=0).build())
    with pytest.raises(Conflict, match="TimeMin counts only until a job starts"):
        asyncio.run(commands.update(cluster, "1", ALICE, time_min_seconds=60))


def test_a_lowered_limit_is_stored_and_a_requeue_gives_the_job_its_own(
    db: str, clock: VirtualClock, cluster: Cluster
) -> None:
    store(cluster, make_job(1).limit(3600).time_min(600).build())
    plan = Plan(revision=0, placements=(Placement(1, ON_N1, time_limit_s=1200),))
    assert asyncio.run(cluster.apply_plan(plan)) == [1]
    assert cluster.jobs[1].time_limit_s == 1200
    asyncio.run(cluster.close())
    again = new_cluster(db, clock)  # what the store holds, after a restart
    started = again.jobs[1]
    assert (started.state, started.time_limit_s) == (JobState.RUNNING, 1200)
    assert requeued(started, clock.now()).time_limit_s == 3600
    again.store.close()


def test_a_placement_whose_time_min_changed_since_the_pass_is_refused(cluster: Cluster) -> None:
    store(cluster, make_job(1).limit(3600).time_min(1500).build())
    plan = Plan(revision=0, placements=(Placement(1, ON_N1, time_limit_s=1200),))
    assert asyncio.run(cluster.apply_plan(plan)) == []
    assert cluster.jobs[1].state is JobState.PENDING
