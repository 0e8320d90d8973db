"""``[scheduler] max_job_starts`` (Slurm's sched_max_job_start): a plan starts at most
that many of its placements of one partition, in its order; the rest stay pending for the next pass,
which the commit wakes; 0 is no limit."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from hal.config.model import config_from_dict
from hal.core.errors import InvalidRequest
from hal.core.job import Allocation
from hal.core.resources import ResourceVector
from hal.core.states import JobState
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.state.cluster import Cluster
from hal.testing import make_job
from hal.testing.mirror import store

ONE_CPU = Allocation(("n1",), (ResourceVector(cpus=1),))  # n1 has 2 CPUs


def plan_of(*job_ids: int) -> Plan:
    return Plan(revision=0, placements=tuple(Placement(j, ONE_CPU) for j in job_ids))


def test_a_plan_starts_at_most_max_job_starts_in_its_order(cluster: Cluster) -> None:
    cluster.config = dataclasses.replace(cluster.config, scheduler_max_job_starts=1)
    store(cluster, make_job(1).build(), make_job(2).build())
    cluster.changed.clear()
    assert asyncio.run(cluster.apply_plan(plan_of(2, 1))) == [2]
    assert cluster.jobs[1].state is JobState.PENDING
    assert cluster.changed.is_set()  # the next pass comes at once
    assert asyncio.run(cluster.apply_plan(plan_of(1))) == [1]


def test_the_cap_is_per_partition(cluster: Cluster) -> None:
    """One partition's backlog never keeps another's jobs from starting: the cap counts
    each partition's starts apart."""
    cluster.config = dataclasses.replace(cluster.config, scheduler_max_job_starts=1)
    other = make_job(3).partition("other").build()
    store(cluster, make_job(1).build(), make_job(2).build(), other)
    assert asyncio.run(cluster.apply_plan(plan_of(1, 2, 3))) == [1, 3]
    assert cluster.jobs[2].state is JobState.PENDING


def test_no_limit_with_zero(cluster: Cluster) -> None:
    cluster.config = dataclasses.replace(cluster.config, scheduler_max_job_starts=0)
    store(cluster, make_job(1).build(), make_job(2).build())
    assert asyncio.run(cluster.apply_plan(plan_of(1, 2))) == [1, 2]


def test_the_key_takes_a_whole_number() -> None:
    assert config_from_dict({}).scheduler_max_job_starts == 1000
    got = config_from_dict({"scheduler": {"max_job_starts": 0}})
    assert got.scheduler_max_job_starts == 0
    with pytest.raises(InvalidRequest, match=r"scheduler\.max_job_starts: must be a whole number"):
        config_from_dict({"scheduler": {"max_job_starts": -1}})
