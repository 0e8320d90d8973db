"""The server's reaction to a spot interruption notice (``hal.state.interruptions``), on a
real ``Cluster`` mirror with a virtual clock: the grace a ``--signal`` job gets, the
requeue keeping its place, the run recorded PREEMPTED and interrupted with the work it
lost, and NODE_FAIL for a job that may not be requeued."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import replace

from hal.core.clock import VirtualClock
from hal.core.job import Job, SignalSpec
from hal.core.preemption import GRACE_END
from hal.core.states import JobState, NodeState
from hal.state import agents, interruptions, preempt
from hal.state.cluster import Cluster
from hal.testing import make_job
from hal.testing.mirror import commit, signals, store
from hal.wire.agent import Cancel, InterruptionNotice, JobReport

STARTED_AGO = 600.0


def running(clock: VirtualClock, job_id: int, sig: SignalSpec | None, requeue: bool = True) -> Job:
    job = make_job(job_id).cpus(1).mem_gib(1).running_on("n1", start=clock.now() - STARTED_AGO)
    built = job.build()
    spec = replace(built.spec, signal=sig, requeue=requeue)
    return built.evolve(launched=True, spec=spec)


def notice(clock: VirtualClock, ahead: float = 120.0) -> InterruptionNotice:
    return InterruptionNotice(kind="interruption", action="terminate", time=clock.now() + ahead)


def cancels(cluster: Cluster, job_id: int) -> list[str]:
    out = cluster.agent_sessions["n1"].outbox
    return [i.state for i in out if isinstance(i, Cancel) and i.job_id == job_id]


def finished(cluster: Cluster, job_id: int, state: str, when: float) -> None:
    report = JobReport(seq=1, job_id=job_id, attempt=0, kind="finished", time=when, state=state)
    asyncio.run(agents.apply_reports(cluster, "n1", [report]))


def test_a_signal_job_checkpoints_until_kill_wait_before_the_machine_goes(
    cluster: Cluster, clock: VirtualClock
) -> None:
    store(cluster, running(clock, 1, SignalSpec(signal.SIGUSR1, 300, batch_only=True)))
    submitted = cluster.jobs[1].submit_time
    asyncio.run(interruptions.interrupt(cluster, "n1", notice(clock)))
    node = cluster.nodes["n1"]
    assert node.state is NodeState.DRAIN and node.reason.startswith("cloud: spot interruption")
    assert signals(cluster, 1) == [signal.SIGUSR1]
    kill_wait = cluster.config.kill_wait_seconds
    grace_end = clock.now() + 120 - kill_wait  # not its 300 s: the machine goes first
    assert float(cluster.jobs[1].extra[GRACE_END]) == grace_end
    assert cluster.jobs[1].state is JobState.RUNNING
    clock.advance(120 - kill_wait)
    asyncio.run(preempt.end_graced(cluster))
    assert cancels(cluster, 1) == ["PENDING"]  # to come back to the queue
    finished(cluster, 1, "PENDING", clock.now() + 1)
    job = cluster.jobs[1]
    assert (job.state, job.restarts, job.submit_time) == (JobState.PENDING, 1, submitted)
    assert job.extra[preempt.REQUEUED_AFTER] == "PREEMPTED"
    assert interruptions.INTERRUPTED not in job.extra  # its new run is not interrupted
    (run,) = cluster.store.runs_of([1])
    assert run.state == "PREEMPTED" and run.interrupted_at is not None
    # killed after its grace: nothing shows it checkpointed, its whole run is lost
    assert run.lost_work == STARTED_AGO + 120 - kill_wait + 1


def test_a_signal_job_that_ends_on_its_own_in_its_grace_lost_only_that_time(
    cluster: Cluster, clock: VirtualClock
) -> None:
    store(cluster, running(clock, 1, SignalSpec(signal.SIGUSR1, 60)))
    asyncio.run(interruptions.interrupt(cluster, "n1", notice(clock)))
    finished(cluster, 1, "COMPLETED", clock.now() + 4)  # it checkpointed and exited 0
    assert cluster.jobs[1].state is JobState.PENDING  # requeued all the same
    (run,) = cluster.store.runs_of([1])
    assert (run.state, run.lost_work) == ("PREEMPTED", 4.0)


def test_a_job_that_may_not_be_requeued_ends_node_fail(
    cluster: Cluster, clock: VirtualClock
) -> None:
    store(cluster, running(clock, 1, None, requeue=False), running(clock, 2, None))
    ended = asyncio.run(interruptions.interrupt(cluster, "n1", notice(clock)))
    assert ended == [1, 2]
    assert [cluster.jobs[i].state for i in (1, 2)] == [JobState.COMPLETING] * 2
    assert (cancels(cluster, 1), cancels(cluster, 2)) == (["NODE_FAIL"], ["PENDING"])
    assert signals(cluster, 1) == []
    finished(cluster, 1, "NODE_FAIL", clock.now() + 2)
    job = cluster.jobs[1]
    assert job.state is JobState.NODE_FAIL
    assert interruptions.lost_work(job, job.state.value, clock.now() + 2) == STARTED_AGO + 2


def test_a_machine_going_within_kill_wait_gets_its_signal_and_is_ended_at_once(
    cluster: Cluster, clock: VirtualClock
) -> None:
    store(cluster, running(clock, 1, SignalSpec(signal.SIGUSR2, 60)))
    asyncio.run(interruptions.interrupt(cluster, "n1", notice(clock, ahead=5)))
    assert signals(cluster, 1) == [signal.SIGUSR2]
    assert cluster.jobs[1].state is JobState.COMPLETING


def test_a_second_notice_changes_nothing(cluster: Cluster, clock: VirtualClock) -> None:
    store(cluster, running(clock, 1, None))
    first = notice(clock)
    asyncio.run(interruptions.interrupt(cluster, "n1", first))
    events = len(cluster.recent_events)
    clock.advance(5)
    assert asyncio.run(interruptions.interrupt(cluster, "n1", notice(clock))) == []
    assert len(cluster.recent_events) == events
    assert cancels(cluster, 1) == ["PENDING"]


def test_a_rebalance_drains_an_up_node_only(cluster: Cluster, clock: VirtualClock) -> None:
    store(cluster, running(clock, 1, None))
    risk = InterruptionNotice(kind="rebalance", time=clock.now())
    asyncio.run(interruptions.on_notices(cluster, "n1", [risk]))
    assert cluster.nodes["n1"].reason.startswith("cloud: rebalance recommended at")
    assert cluster.jobs[1].state is JobState.RUNNING
    asyncio.run(interruptions.on_notices(cluster, "n1", [notice(clock), risk]))
    assert cluster.nodes["n1"].reason.startswith("cloud: spot interruption at")


def test_no_lost_work_for_a_run_that_ended_otherwise(clock: VirtualClock) -> None:
    job = running(clock, 1, None)
    assert interruptions.lost_work(job, "COMPLETED", clock.now()) is None
    assert interruptions.lost_work(job, "NODE_FAIL", clock.now()) == STARTED_AGO


def test_a_job_its_owner_cancels_in_its_grace_ends_cancelled(
    cluster: Cluster, clock: VirtualClock
) -> None:
    store(cluster, running(clock, 1, SignalSpec(signal.SIGUSR1, 60)))
    asyncio.run(interruptions.interrupt(cluster, "n1", notice(clock)))
    cancelled = cluster.jobs[1].evolve(state=JobState.COMPLETING, cancelled_by="alice")
    asyncio.run(commit(cluster, [cancelled]))  # as scancel leaves it
    finished(cluster, 1, "CANCELLED", clock.now() + 3)
    job = cluster.jobs[1]
    assert (job.state, job.restarts) == (JobState.CANCELLED, 0)
