"""Preemption mode ``suspend`` in the server's mirror (``hal.state.preempt``): the victim
is stopped and gives back its CPUs only, the preemptor starts on them, and the victim
goes on once they are free again; on a real ``Cluster`` over SQLite, no agents."""

from __future__ import annotations

import asyncio
import signal

import pytest

from hal.core.clock import VirtualClock
from hal.core.errors import Conflict
from hal.core.job import Allocation, Job
from hal.core.node import Partition
from hal.core.preemption import PREEMPT_MODE, PREEMPTED_BY, PREEMPTING
from hal.core.reservation import Reservation, ReservationFlag
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState, NodeState
from hal.scheduler.framework.snapshot import Placement, Plan, Preemption
from hal.state import commands, preempt
from hal.state.agents import AgentSession
from hal.state.cluster import Caller, Cluster
from hal.state.plan_applier import check_placement
from hal.state.suspension import SUSPENDED_AT, SUSPENDED_S
from hal.testing import make_job
from hal.testing.mirror import commit, new_cluster, signals, store

ADMIN = Caller("root", admin=True)


def low(job_id: int, start: float) -> Job:
    job = make_job(job_id).qos("low").cpus(2).mem_gib(1).running_on("n1", start=start).build()
    return job.evolve(launched=True)


def high(job_id: int = 2) -> Job:
    # in the mirror's partition (HalConfig's default): it may start on n1
    return make_job(job_id).qos("high").partition("debug").cpus(2).mem_gib(1).build()


def on_n1(job_id: int, memory_gib: int = 1) -> Placement:
    return Placement(job_id, Allocation(("n1",), (ResourceVector(2, memory_gib * GiB, 0),)))


def suspend_for_high(cluster: Cluster, clock: VirtualClock) -> None:
    store(cluster, low(1, clock.now() - 60), high())
    plan = Plan(cluster.revision, preemptions=(Preemption(1, 2, "suspend", 30.0),))
    asyncio.run(cluster.apply_plan(plan))


def test_the_victim_is_stopped_and_gives_back_its_cpus_only(
    cluster: Cluster, clock: VirtualClock
) -> None:
    suspend_for_high(cluster, clock)
    victim = cluster.jobs[1]
    assert victim.state is JobState.SUSPENDED
    assert victim.extra[PREEMPTED_BY] == "2" and victim.extra[PREEMPT_MODE] == "suspend"
    assert float(victim.extra[SUSPENDED_AT]) == clock.now()
    assert "requeue" not in victim.extra  # nothing is ended
    assert PREEMPTING in cluster.jobs[2].extra
    assert signals(cluster, 1) == [signal.SIGSTOP]  # no --signal, no grace time
    used = cluster.usage["n1"]
    assert used.allocated == ResourceVector(0, 1 * GiB, 0) and used.jobs == {1}
    events = [e for e in cluster.recent_events if e.kind == "job.preempted"]
    assert events[-1].data == {"by": 2, "mode": "suspend", "grace_s": 0.0}
    assert events[-1].state == "SUSPENDED"
    # the preemptor fits on the freed CPUs, but not if it needs the memory kept
    assert check_placement(on_n1(2), cluster.jobs, cluster.nodes, cluster.usage) is None
    too_big = check_placement(on_n1(2, 4), cluster.jobs, cluster.nodes, cluster.usage)
    assert too_big == "node n1 no longer has room"
    # its preemptor has not started yet: the victim waits for it
    assert preempt.resumable(cluster) == []


def test_it_goes_on_when_its_preemptor_ends(cluster: Cluster, clock: VirtualClock) -> None:
    suspend_for_high(cluster, clock)
    clock.advance(10)
    assert asyncio.run(cluster.apply_plan(Plan(cluster.revision, placements=(on_n1(2),)))) == [2]
    assert cluster.usage["n1"].allocated == ResourceVector(2, 2 * GiB, 0)
    assert asyncio.run(preempt.resume_freed(cluster)) == []  # its CPUs are the high job's
    assert cluster.jobs[1].state is JobState.SUSPENDED
    clock.advance(20)
    done, event = cluster.finish(cluster.jobs[2], JobState.COMPLETED, clock.now())
    asyncio.run(commit(cluster, [done], [event]))
    assert asyncio.run(preempt.resume_freed(cluster)) == [1]
    resumed = cluster.jobs[1]
    assert resumed.state is JobState.RUNNING
    assert not {PREEMPTED_BY, PREEMPT_MODE, SUSPENDED_AT} & resumed.extra.keys()
    assert float(resumed.extra[SUSPENDED_S]) == 30.0  # left out of its run time
    assert signals(cluster, 1) == [signal.SIGSTOP, signal.SIGCONT]
    assert cluster.usage["n1"].allocated == ResourceVector(2, 1 * GiB, 0)
    assert [e.data for e in cluster.recent_events if e.kind == "job.resumed"] == [
        {"after": "preempted"}
    ]


def _moved(cluster: Cluster) -> None:
    cluster.partitions["other"] = Partition("other", nodes=("n9",))
    asyncio.run(commands.update(cluster, "2", ADMIN, partition="other"))


def _drained(cluster: Cluster) -> None:
    cluster.nodes["n1"] = cluster.nodes["n1"].evolve(state=NodeState.DRAIN)


def _reserved(cluster: Cluster) -> None:
    now = cluster.clock.now()
    flags = frozenset({ReservationFlag.MAINT, ReservationFlag.IGNORE_JOBS})
    cluster.reservations["maint"] = Reservation(
        "maint", now, now + 3600, ("n1",), ("root",), flags=flags
    )


@pytest.mark.parametrize("change", [_moved, _drained, _reserved])
def test_it_goes_on_when_its_preemptor_can_no_longer_start_there(
    cluster: Cluster, clock: VirtualClock, change: object
) -> None:
    """Its preemptor, still pending, was moved to a partition without the victim's node,
    or that node was drained, or a reservation now keeps the preemptor off it: it will
    not take the victim's CPUs, and Slurm never leaves a job suspended for a preemptor
    that does not run there. The victim went on only once its preemptor started, ended
    or was held, so it stayed stopped for as long as the preemptor pended."""
    suspend_for_high(cluster, clock)
    assert preempt.resumable(cluster) == []
    change(cluster)  # type: ignore[operator]
    assert asyncio.run(preempt.resume_freed(cluster)) == [1]
    assert cluster.jobs[1].state is JobState.RUNNING
    assert signals(cluster, 1) == [signal.SIGSTOP, signal.SIGCONT]
    assert cluster.usage["n1"].allocated == ResourceVector(2, 1 * GiB, 0)
    assert cluster.jobs[2].state is JobState.PENDING


def test_oldest_suspension_first_and_never_onto_taken_cpus(
    cluster: Cluster, clock: VirtualClock
) -> None:
    marks = {PREEMPTED_BY: "99", PREEMPT_MODE: "suspend"}  # their preemptor is gone
    newer = low(1, 0).evolve(
        state=JobState.SUSPENDED, extra={**marks, SUSPENDED_AT: repr(clock.now() - 5)}
    )
    older = low(3, 0).evolve(
        state=JobState.SUSPENDED, extra={**marks, SUSPENDED_AT: repr(clock.now() - 50)}
    )
    store(cluster, newer, older)
    assert cluster.usage["n1"].allocated.cpus == 0
    # both want all 2 CPUs: only the one suspended first goes on
    assert asyncio.run(preempt.resume_freed(cluster)) == [3]
    assert cluster.usage["n1"].allocated.cpus == 2
    assert asyncio.run(preempt.resume_freed(cluster)) == []
    assert cluster.jobs[1].state is JobState.SUSPENDED


def test_an_admin_suspension_keeps_its_cpus_and_is_not_resumed(
    cluster: Cluster, clock: VirtualClock
) -> None:
    store(cluster, low(1, clock.now() - 60))
    asyncio.run(commands.suspend(cluster, "1", ADMIN))
    assert cluster.jobs[1].state is JobState.SUSPENDED
    assert cluster.usage["n1"].allocated.cpus == 2  # scontrol suspend: as before
    assert preempt.resumable(cluster) == []


def test_a_victim_cancelled_while_suspended_ends_cancelled_without_its_cpus(
    cluster: Cluster, clock: VirtualClock
) -> None:
    suspend_for_high(cluster, clock)
    asyncio.run(cluster.apply_plan(Plan(cluster.revision, placements=(on_n1(2),))))
    asyncio.run(commands.cancel(cluster, "1", ADMIN))
    assert cluster.jobs[1].state is JobState.COMPLETING
    assert cluster.usage["n1"].allocated.cpus == 2  # still only the high job's
    ended, _ = cluster.finish(cluster.jobs[1], JobState.CANCELLED, clock.now())
    assert ended.state is JobState.CANCELLED  # not PREEMPTED: it was not being ended


def test_a_restarted_server_still_resumes_once_the_agent_is_back(
    cluster: Cluster, clock: VirtualClock, db: str
) -> None:
    suspend_for_high(cluster, clock)
    # its preemptor is cancelled before it starts; then the server restarts
    cancelled = cluster.jobs[2].evolve(state=JobState.CANCELLED, end_time=clock.now())
    asyncio.run(commit(cluster, [cancelled], []))
    cluster.store.close()
    restarted = new_cluster(db, clock)
    try:
        del restarted.agent_sessions["n1"]
        assert restarted.jobs[1].state is JobState.SUSPENDED
        assert restarted.usage["n1"].allocated == ResourceVector(0, 1 * GiB, 0)
        assert preempt.resumable(restarted) == []  # no agent to send SIGCONT to yet
        restarted.agent_sessions["n1"] = AgentSession("n1")
        assert asyncio.run(preempt.resume_freed(restarted)) == [1]
        assert signals(restarted, 1) == [signal.SIGCONT]
    finally:
        restarted.store.close()


def test_an_admin_cannot_resume_a_victim_onto_its_preemptors_cpus(
    cluster: Cluster, clock: VirtualClock
) -> None:
    """Resumed by hand, the victim took its CPUs back while its preemptor held them (4
    CPUs booked on a 2-CPU node), and kept its preemption marks."""
    suspend_for_high(cluster, clock)
    asyncio.run(cluster.apply_plan(Plan(cluster.revision, placements=(on_n1(2),))))
    with pytest.raises(Conflict, match="resumes by itself once they are free"):
        asyncio.run(commands.suspend(cluster, "1", ADMIN, resume=True))
    assert cluster.jobs[1].state is JobState.SUSPENDED
    assert cluster.usage["n1"].allocated.cpus == 2  # the preemptor's only
