"""A requeued preemption victim shows that it was preempted: PENDING again, with the
state its run ended in (``requeued_after``), when it was preempted (``preempt_time``,
scontrol's ``PreemptTime``) and one more restart; an administrator's requeue does not
claim a preemption. On a real ``Cluster`` over SQLite, no agents."""

from __future__ import annotations

import asyncio

from hal.api.convert import job_info
from hal.compat.formats import timestamp
from hal.compat.scontrol import job_record
from hal.core.clock import VirtualClock
from hal.core.states import JobState
from hal.scheduler.framework.snapshot import Plan, Preemption
from hal.state.cluster import Cluster
from hal.testing import make_job
from hal.testing.mirror import commit, store


def end_run(cluster: Cluster, clock: VirtualClock, reported: JobState) -> None:
    """Job 1's agent reports its run ended (as ``reported``) a few seconds later."""
    clock.advance(5)
    done, event = cluster.finish(cluster.jobs[1], reported, clock.now())
    asyncio.run(commit(cluster, [done], [event]))


def test_a_requeued_victim_says_it_was_preempted(cluster: Cluster, clock: VirtualClock) -> None:
    running = make_job(1).cpus(2).running_on("n1", start=clock.now() - 60).build()
    store(cluster, running.evolve(launched=True), make_job(2).cpus(2).build())
    preempted_at = clock.now()
    plan = Plan(cluster.revision, preemptions=(Preemption(1, 2, "requeue", 0.0),))
    asyncio.run(cluster.apply_plan(plan))
    end_run(cluster, clock, JobState.PENDING)  # requeue mode: the agent reports PENDING
    info = job_info(cluster.jobs[1], cluster)
    assert (info.state, info.restarts) == ("PENDING", 1)
    assert (info.requeued_after, info.preempt_time) == ("PREEMPTED", preempted_at)
    assert f"PreemptTime={timestamp(preempted_at)}" in job_record(info, clock.now())


def test_an_administrators_requeue_claims_no_preemption(
    cluster: Cluster, clock: VirtualClock
) -> None:
    running = make_job(1).cpus(2).running_on("n1", start=clock.now() - 60).build()
    store(cluster, running.evolve(launched=True, extra={"requeue": "1"}))
    end_run(cluster, clock, JobState.PENDING)
    info = job_info(cluster.jobs[1], cluster)
    assert (info.state, info.restarts) == ("PENDING", 1)
    assert (info.requeued_after, info.preempt_time) == (None, None)
    assert "PreemptTime=None" in job_record(info, clock.now())
