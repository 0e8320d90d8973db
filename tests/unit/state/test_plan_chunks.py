"""A plan's starts are written ``APPLY_CHUNK`` at a time, a change each: the same
starts, reasons, ends and launches as one change would write; a het job's components in
one change; ``max_job_starts`` counted across them; a change that fails leaves those
before it stored and the rest pending, and the plan applied again starts only those."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from hal.core.clock import VirtualClock
from hal.core.job import Allocation, Job
from hal.core.reservation import Reservation, ReservationFlag
from hal.core.resources import ResourceVector
from hal.core.states import JobState, PendingReason
from hal.scheduler.framework.snapshot import PendingUpdate, Placement, Plan, Termination
from hal.state import agents, commands, plan_applier
from hal.state.agents import AgentSession
from hal.state.cluster import Caller, Cluster
from hal.state.memory_store import MemoryStateStore
from hal.testing import make_job
from hal.testing.builders import make_node
from hal.testing.mirror import counted, intercept, new_cluster, store
from hal.wire.agent import Launch

NODES = ("n1", "n2", "n3", "n4")  # 2 CPUs each


def on(node: str, cpus: int = 1) -> Allocation:
    return Allocation((node,), (ResourceVector(cpus=cpus),))


def a_cluster(clock: VirtualClock, *jobs: Job) -> Cluster:
    cluster = new_cluster(MemoryStateStore(), clock)
    for name in NODES:
        cluster.nodes[name] = make_node(name).cpus(2).mem_gib(4).build()
        cluster.agent_sessions[name] = AgentSession(name)
    store(cluster, *jobs)
    return cluster


def pending(count: int) -> list[Job]:
    """Jobs 1 to ``count``, and 13, whose dependency the plan finds met."""
    waiting = make_job(13).reason(PendingReason.DEPENDENCY).build()
    return [make_job(i).build() for i in range(1, count + 1)] + [waiting]


def the_plan() -> Plan:
    """Ten placements, two of which no longer fit when their turn comes (n1 full), an
    end and a reason."""
    spots = ["n1", "n1", "n2", "n2", "n3", "n3", "n4", "n1", "n4", "n1"]
    return Plan(
        revision=0,
        placements=tuple(Placement(i + 1, on(n)) for i, n in enumerate(spots)),
        terminations=(
            Termination(11, JobState.CANCELLED, PendingReason.DEPENDENCY_NEVER_SATISFIED),
        ),
        updates=(
            PendingUpdate(12, PendingReason.PRIORITY, 2_000_000.0),
            PendingUpdate(13, PendingReason.PRIORITY),
        ),
    )


def outcome(cluster: Cluster) -> dict[str, object]:
    """What an apply leaves: the mirror's jobs, the stored ones, the launches sent."""
    stored = {j.id: j for j in cluster.store.load_jobs(active_or_ended_after=0.0)}
    return {
        "mirror": {j.id: (j.state, j.allocation, j.reason) for j in cluster.jobs.values()},
        "stored": {i: (j.state, j.allocation, j.eligible_time) for i, j in stored.items()},
        "launched": {
            name: sorted(i.job_id for i in s.outbox if isinstance(i, Launch))
            for name, s in cluster.agent_sessions.items()
        },
    }


@pytest.fixture
def chunk_of_three(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan_applier, "APPLY_CHUNK", 3)


def test_chunks_write_what_one_change_writes(
    clock: VirtualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = []
    for size in (1000, 3):
        monkeypatch.setattr(plan_applier, "APPLY_CHUNK", size)
        monkeypatch.setattr(plan_applier, "UPDATE_CHUNK", size // 3)  # (1: one a change)
        cluster = a_cluster(clock, *pending(12))
        opened = counted(cluster)
        started = asyncio.run(cluster.apply_plan(the_plan()))
        results.append((started, outcome(cluster), opened[0]))
    (whole, whole_outcome, one), (chunked, chunked_outcome, several) = results
    assert whole == chunked == [1, 2, 3, 4, 5, 6, 7, 9]  # 8 and 10: n1 was full
    assert chunked_outcome == whole_outcome
    mirror = chunked_outcome["mirror"]
    assert isinstance(mirror, dict)
    assert mirror[11][0] is JobState.CANCELLED and mirror[12][2] is PendingReason.PRIORITY
    stored = chunked_outcome["stored"]
    assert isinstance(stored, dict)
    assert stored[13][2] == clock.now()  # eligible from this plan on: written
    # the starts with the end, then the reason written (job 12's is kept in memory
    # only); chunked, a transaction a slice of three
    assert (one, several) == (2, 5)


def test_a_het_job_starts_whole_across_slices(clock: VirtualClock, chunk_of_three: None) -> None:
    """The components of a het job, 2nd and 5th in the plan, go in one change: both
    start; another's, one of which no longer fits, start neither."""
    jobs = [make_job(i).build() for i in (1, 2, 5, 6, 7)]
    jobs += [make_job(3).het(3, 0, 2).build(), make_job(4).het(3, 1, 2).build()]
    jobs += [make_job(8).het(8, 0, 2).build(), make_job(9).het(8, 1, 2).build()]
    cluster = a_cluster(clock, *jobs)
    plan = Plan(
        revision=0,
        placements=(
            Placement(1, on("n1")),
            Placement(3, on("n2")),
            Placement(2, on("n1")),
            Placement(5, on("n3")),
            Placement(4, on("n2")),
            Placement(6, on("n3")),
            Placement(8, on("n4")),
            Placement(9, on("n1")),  # n1 is full by then: neither 8 nor 9 starts
            Placement(7, on("n4")),
        ),
    )
    assert plan_applier._chunks(cluster, plan.placements, 3) == [
        (*plan.placements[0:2], plan.placements[4]),
        (plan.placements[2], plan.placements[3], plan.placements[5]),
        (plan.placements[6], plan.placements[7], plan.placements[8]),
    ]
    started = asyncio.run(cluster.apply_plan(plan))
    assert sorted(started) == [1, 2, 3, 4, 5, 6, 7]
    assert cluster.jobs[8].state is cluster.jobs[9].state is JobState.PENDING


def test_max_job_starts_counts_across_slices(clock: VirtualClock, chunk_of_three: None) -> None:
    cluster = a_cluster(clock, *pending(8))
    cluster.config = dataclasses.replace(cluster.config, scheduler_max_job_starts=4)
    spots = ["n1", "n1", "n2", "n2", "n3", "n3", "n4", "n4"]
    plan = Plan(0, placements=tuple(Placement(i + 1, on(n)) for i, n in enumerate(spots)))
    assert asyncio.run(cluster.apply_plan(plan)) == [1, 2, 3, 4]
    waiting = {j.id for j in cluster.jobs.values() if j.state is JobState.PENDING}
    assert waiting == {5, 6, 7, 8, 13}  # (13: never placed)


def test_a_later_slice_refuses_what_changed_after_an_earlier_one(
    clock: VirtualClock, chunk_of_three: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the first slice's change and the second's, job 5 is cancelled and n4
    drained: the second slice starts 4 and 6, not 5; the later ones neither 7 nor 9
    (on n4), nor 8 and 10 (n1 full); the plan's end is still written."""
    cluster = a_cluster(clock, *pending(12))
    apply_part = plan_applier._apply_part
    parts = [0]

    async def meanwhile(*args: Any) -> list[int]:
        parts[0] += 1
        if parts[0] == 2:  # after the first slice committed and launched
            await commands.cancel(cluster, "5", Caller("root", admin=True))
            await agents.set_node_state(cluster, "n4", "DRAIN", "maint", user="root")
        return await apply_part(*args)

    monkeypatch.setattr(plan_applier, "_apply_part", meanwhile)
    started = asyncio.run(cluster.apply_plan(the_plan()))
    assert started == [1, 2, 3, 4, 6]  # 5 cancelled, 7 and 9 on n4, 8 and 10 on full n1
    assert cluster.jobs[5].state is JobState.CANCELLED
    assert cluster.jobs[7].state is cluster.jobs[9].state is JobState.PENDING
    assert cluster.jobs[11].state is JobState.CANCELLED  # the plan's end still written
    launched = outcome(cluster)["launched"]
    assert isinstance(launched, dict)
    assert sorted(i for ids in launched.values() for i in ids) == started


def test_a_partly_refused_het_job_does_not_count_toward_max_job_starts(
    clock: VirtualClock,
) -> None:
    """A het job whose second component's node a reservation now claims starts
    neither component; its first, counted while the change re-checked it, leaves the
    cap's room to the next slice's job."""
    jobs = [make_job(1).build(), make_job(4).build()]
    jobs += [make_job(2).het(2, 0, 2).build(), make_job(3).het(2, 1, 2).build()]
    cluster = a_cluster(clock, *jobs)
    cluster.config = dataclasses.replace(cluster.config, scheduler_max_job_starts=2)
    now = clock.now()
    cluster.reservations["maint"] = Reservation(
        "maint", now, now + 3600, ("n4",), ("root",), flags=frozenset({ReservationFlag.MAINT})
    )
    plan = Plan(
        0,
        placements=(
            Placement(1, on("n1")),
            Placement(2, on("n2")),
            Placement(3, on("n4")),  # reserved: the het job starts whole or not at all
            Placement(4, on("n3")),
        ),
    )
    assert plan_applier._chunks(cluster, plan.placements, 3) == [
        plan.placements[:3],
        plan.placements[3:],
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plan_applier, "APPLY_CHUNK", 3)
        assert asyncio.run(cluster.apply_plan(plan)) == [1, 4]
    assert cluster.jobs[2].state is cluster.jobs[3].state is JobState.PENDING


def test_a_failed_slice_leaves_the_rest_pending_and_a_retry_starts_them(
    clock: VirtualClock, chunk_of_three: None
) -> None:
    cluster = a_cluster(clock, *pending(12))
    opened = cluster.store.transaction
    writes = [0]

    def second_refused(*args: object) -> None:
        writes[0] += 1
        if writes[0] == 2:
            raise RuntimeError("the database refused the write")

    intercept(cluster, "update_jobs", second_refused)
    with pytest.raises(RuntimeError, match="refused"):
        asyncio.run(cluster.apply_plan(the_plan()))
    after = outcome(cluster)
    running = {1, 2, 3}  # the first slice's
    for where in ("mirror", "stored"):
        states = after[where]
        assert isinstance(states, dict)
        assert {i for i, s in states.items() if s[0] is JobState.RUNNING} == running
        assert states[11][0] is JobState.PENDING  # the end went with the last slice
    launched = after["launched"]
    assert isinstance(launched, dict)
    assert sorted(i for ids in launched.values() for i in ids) == sorted(running)

    cluster.store.transaction = opened  # type: ignore[method-assign]
    assert asyncio.run(cluster.apply_plan(the_plan())) == [4, 5, 6, 7, 9]
    whole = a_cluster(clock, *pending(12))
    asyncio.run(whole.apply_plan(the_plan()))
    assert outcome(cluster) == outcome(whole)  # as if applied once, nothing launched twice
