"""Backfill's start-now tries and the ``limits`` plugin: each try asks the job's PreFilter
afresh, so what the pass did before it counts and nothing of an earlier verdict is kept.
A job that passed limits in the main loop is refused once backfill started its user's
other job; and a limit that an Unreserve gave back within the stage holds nobody (a
verdict kept from one try to the next, or shared between jobs of one user, would get
one of these wrong).

Four nodes of 4 CPUs; jobs 100-102 (bob) run on three of them for an hour, so job 1 (two
whole nodes, first in the queue) blocks the partition and the jobs behind it wait for
backfill, which may start a one-minute job on the free node."""

from __future__ import annotations

from typing import Any

from hal.core.job import Allocation, Job
from hal.core.priority import PriorityPolicy, Qos
from hal.core.states import PendingReason as R
from hal.scheduler.framework import CycleState, PassContext, Scheduler
from hal.scheduler.framework.main_loop import QUEUE
from hal.scheduler.framework.status import SUCCESS, Status, unschedulable
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.testing import JobBuilder, cluster, make_job, placed_nodes

NOW = 1_000_000.0


class RefuseAtReserve:
    """A Reserve plugin (after limits) that refuses job 2: limits' Unreserve takes out
    again what its Reserve counted for it."""

    name = "refuse2"

    def reserve(self, ctx: PassContext, state: CycleState, job: Job, alloc: Allocation) -> Status:
        if job.id == 2:
            return unschedulable(R.RESOURCES, "refused at Reserve", self.name)
        return SUCCESS

    def unreserve(self, ctx: PassContext, state: CycleState, job: Job, alloc: Allocation) -> None:
        return None


def _scheduler(max_jobs_per_user: int, extra: RefuseAtReserve | None = None) -> Scheduler:
    """The default profile with limits (QoS ``q``), and ``extra`` after them."""
    policy = PriorityPolicy(qos=(Qos("q", max_jobs_per_user=max_jobs_per_user),))
    registry = default_registry(policy=policy)
    prof = default_profile(limits=True)
    if extra is not None:
        plugins = prof["plugins"]
        assert isinstance(plugins, list)
        registry.register(extra.name, lambda args: extra)
        plugins.append(extra.name)
    return build_scheduler(prof, registry)


def _snapshot(*pending: JobBuilder) -> Any:
    busy = [
        make_job(100 + i).user("bob").cpus(4).limit(3600).running_on(f"n000{i + 1}", start=NOW)
        for i in range(3)
    ]
    head = make_job(1).nodes(2).tasks(2, per_node=1).cpus(4).limit(3600).priority(100)
    return cluster(NOW).uniform_nodes(4, cpus=4).running(*busy).pending(head, *pending).build()


def _alice(job_id: int) -> JobBuilder:
    return make_job(job_id).user("alice").qos("q").cpus(1).limit(60).priority(50 - job_id)


def test_a_start_earlier_in_the_stage_counts_at_the_next_try() -> None:
    """Jobs 2 and 3 (alice, MaxJobsPerUser 1) both pass limits in the main loop, behind
    job 1 (the queue's verdict). Backfill starts job 2; job 3's try is refused by limits,
    whose verdict replaces the queue's. With MaxJobsPerUser 2 both start."""
    result = _scheduler(1).run_pass(_snapshot(_alice(2), _alice(3)))
    assert result.statuses[1].reason is R.RESOURCES
    assert set(placed_nodes(result.plan)) == {2}
    st = result.statuses[3]
    assert (st.plugin, st.reason) == ("limits", R.QOS_MAX_JOBS_PER_USER)
    assert st.message == "MaxJobsPerUser 1 of QoS q"
    result = _scheduler(2).run_pass(_snapshot(_alice(2), _alice(3)))
    assert set(placed_nodes(result.plan)) == {2, 3}


def test_without_backfill_the_jobs_keep_the_queues_verdict() -> None:
    """The same pass with no backfill stage: neither job is tried, both wait behind job 1
    (so the refusal above is backfill's own, given after its start)."""
    result = _scheduler(1).run_pass(_snapshot(_alice(2), _alice(3)), backfill=False)
    assert placed_nodes(result.plan) == {}
    assert {result.statuses[i].plugin for i in (2, 3)} == {QUEUE}


def test_a_limit_an_unreserve_gave_back_holds_nobody() -> None:
    """Job 2's backfill cycle reaches Reserve: limits counts it for alice, then the next
    Reserve plugin refuses it and limits takes it out again. Job 3, tried after, finds
    alice under her MaxJobsPerUser and starts on the node job 2 would have had."""
    result = _scheduler(1, RefuseAtReserve()).run_pass(_snapshot(_alice(2), _alice(3)))
    assert result.statuses[2].plugin == "refuse2"
    assert placed_nodes(result.plan) == {3: ("n0004",)}
