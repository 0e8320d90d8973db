"""Advance reservations in the state layer, on SQLite and on the real PostgreSQL: kept
across a restart, validated with messages that say what to do, checked at submit."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from hal.config.model import HalConfig
from hal.config.priority import priority_from_dict
from hal.core.clock import VirtualClock
from hal.core.errors import Conflict, InvalidRequest, NotFound, PermissionDenied
from hal.core.job import Allocation, JobSpec
from hal.core.node import Node
from hal.core.reservation import parse_flags
from hal.core.resources import GiB, ResourceVector
from hal.core.states import JobState
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.state import reservations
from hal.state.cluster import Caller, Cluster
from hal.state.reservations import ReservationRequest
from hal.state.store import SqlStateStore

ROOT = Caller("root", admin=True)
T0 = 1_000_000.0


def spec(**kw: object) -> JobSpec:
    base: dict[str, object] = {"user": "alice", "script": "#!/bin/sh\ntrue\n"}
    base.update(kw)
    return JobSpec(**base)  # type: ignore[arg-type]


USERS = ("alice", "bob", "ann", "carol")


def with_cluster(
    db_url: str, body: Callable[[Cluster], Awaitable[None]], config: HalConfig | None = None
) -> None:
    store = SqlStateStore(db_url)
    store.migrate()
    with store.transaction() as tx:
        for name in ("node1", "node2", "node3"):
            tx.upsert_node(Node(name, ResourceVector(4, 8 * GiB)))
        for i, user in enumerate(USERS):  # a reservation names users that exist
            tx.add_user(user, f"{i:064x}", False, T0)
    cluster = Cluster(store, config or HalConfig(), VirtualClock(T0))

    async def run() -> None:
        await cluster.load()
        try:
            await body(cluster)
        finally:
            await cluster.close()

    asyncio.run(run())


def req(name: str = "maint", **kw: object) -> ReservationRequest:
    base: dict[str, object] = {
        "start": T0 + 3600,
        "duration": 7200.0,
        "nodes": ("node1", "node2"),
        "users": ("alice",),
    }
    base.update(kw)
    return ReservationRequest(name=name, **base)  # type: ignore[arg-type]


def test_unknown_users_and_accounts_are_refused(db_url: str) -> None:
    """A typo in Users= or Accounts= (with [[accounts]]) is refused, as Slurm refuses
    them, and nothing is stored; a user with no token but listed in [[users]] is known."""
    policy = priority_from_dict(
        {
            "accounts": [{"name": "physics"}],
            "users": [{"name": "zoe", "default_account": "physics"}],
        }
    )

    async def body(cluster: Cluster) -> None:
        with pytest.raises(InvalidRequest, match="Invalid user id: 'opps' is no user"):
            await reservations.create(cluster, ROOT, req(users=("alice", "opps")))
        with pytest.raises(InvalidRequest, match=r"'phsyics' is no account .*physics"):
            await reservations.create(cluster, ROOT, req(users=(), accounts=("phsyics",)))
        assert cluster.reservations == {}
        await reservations.create(cluster, ROOT, req(users=("zoe",), accounts=("physics",)))
        with pytest.raises(InvalidRequest, match="Invalid user id"):
            await reservations.update(
                cluster, ROOT, ReservationRequest("maint", users=("nobody-here",))
            )
        assert cluster.reservations["maint"].users == ("zoe",)

    with_cluster(db_url, body, HalConfig(priority=policy))


def test_reservations_survive_a_restart(db_url: str) -> None:
    async def body(cluster: Cluster) -> None:
        made = await reservations.create(
            cluster, ROOT, req(flags=parse_flags("MAINT,DAILY"), accounts=("physics",))
        )
        assert made.nodes == ("node1", "node2") and made.end == T0 + 3 * 3600
        await reservations.create(cluster, ROOT, req("later", nodes=("node3",)))
        await reservations.update(
            cluster, ROOT, ReservationRequest("later", duration=60.0, users=("bob",))
        )
        await reservations.delete(cluster, ROOT, "maint")
        await reservations.create(cluster, ROOT, req("maint2", flags=parse_flags("DAILY")))
        kinds = [e.kind for e in cluster.recent_events]
        assert kinds.count("reservation.created") == 3 and "reservation.deleted" in kinds

    with_cluster(db_url, body)
    again = Cluster(SqlStateStore(db_url), HalConfig(), VirtualClock(T0 + 86_400 + 3600 + 1))

    async def reload() -> None:
        await again.load()
        listed = {r.name: r for r in reservations.current(again)}
        assert set(listed) == {"maint2"}  # "later" (one-off) has ended, maint was deleted
        daily = listed["maint2"]
        assert daily.start == T0 + 86_400 + 3600  # moved on by a day
        assert again.snapshot().reservations[0].name == "maint2"
        assert [r.name for r in again.snapshot().reservations] == ["maint2"]
        await again.close()

    asyncio.run(reload())


def test_only_admins_change_reservations(db_url: str) -> None:
    async def body(cluster: Cluster) -> None:
        alice = Caller("alice")
        with pytest.raises(PermissionDenied, match="only an administrator"):
            await reservations.create(cluster, alice, req())
        await reservations.create(cluster, ROOT, req())
        with pytest.raises(PermissionDenied):
            await reservations.update(cluster, alice, ReservationRequest("maint", duration=60))
        with pytest.raises(PermissionDenied):
            await reservations.delete(cluster, alice, "maint")
        with pytest.raises(NotFound, match="Reservation nope not found"):
            await reservations.delete(cluster, ROOT, "nope")

    with_cluster(db_url, body)


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"nodes": ("node9",)}, InvalidRequest, "unknown node 'node9'"),
        ({"duration": None, "end": T0 + 10}, InvalidRequest, "ends .* before it starts"),
        ({"duration": None}, InvalidRequest, "needs an end"),
        ({"start": T0 - 7200, "duration": 60.0}, InvalidRequest, "in the past"),
        ({"nodes": None, "node_count": 4}, InvalidRequest, "NodeCnt=4 but the cluster has 3"),
        ({"users": ()}, InvalidRequest, "needs Users= or Accounts="),
        ({"nodes": ()}, InvalidRequest, "give Nodes="),
        ({"flags": parse_flags("HOURLY")}, InvalidRequest, "at most its period"),
        ({"partition": "gpu"}, InvalidRequest, "unknown partition 'gpu'"),
    ],
)
def test_bad_reservations_are_refused_with_what_to_do(
    db_url: str, changes: dict[str, object], error: type[Exception], message: str
) -> None:
    async def body(cluster: Cluster) -> None:
        with pytest.raises(error, match=message):
            await reservations.create(cluster, ROOT, req(**changes))

    with_cluster(db_url, body)


def test_overlaps_are_refused_unless_flagged(db_url: str) -> None:
    async def body(cluster: Cluster) -> None:
        await reservations.create(cluster, ROOT, req())
        with pytest.raises(Conflict, match=r"reservation maint holds node2 .* Flags=OVERLAP"):
            await reservations.create(cluster, ROOT, req("b", nodes=("node2", "node3")))
        with pytest.raises(Conflict, match="exists"):
            await reservations.create(cluster, ROOT, req())
        await reservations.create(
            cluster, ROOT, req("b", nodes=("node2",), flags=parse_flags("OVERLAP"))
        )
        await reservations.create(cluster, ROOT, req("c", nodes=("node2",), start=T0 + 4 * 3600))
        # NodeCnt skips the nodes already reserved then
        picked = await reservations.create(cluster, ROOT, req("d", nodes=None, node_count=1))
        assert picked.nodes == ("node3",)
        with pytest.raises(Conflict, match="only 0 of the 1 nodes"):
            await reservations.create(cluster, ROOT, req("e", nodes=None, node_count=1))

    with_cluster(db_url, body)


def test_running_jobs_that_would_cross_the_start_block_creation(db_url: str) -> None:
    async def body(cluster: Cluster) -> None:
        (done,) = await cluster.submit([spec(nodelist=("node1",))])  # unlimited
        job = cluster.jobs[done.job_id]
        alloc = Allocation(("node1",), (ResourceVector(1, 0),))
        cluster.put(job.evolve(state=JobState.RUNNING, start_time=T0, allocation=alloc))
        with pytest.raises(
            Conflict, match=f"Requested nodes are busy: node node1 runs job {job.id}"
        ):
            await reservations.create(cluster, ROOT, req(nodes=("node1",)))
        await reservations.create(
            cluster, ROOT, req(nodes=("node1",), flags=parse_flags("IGNORE_JOBS"))
        )

    with_cluster(db_url, body)


def test_submit_checks_the_reservation(db_url: str) -> None:
    async def body(cluster: Cluster) -> None:
        await reservations.create(cluster, ROOT, req())
        with pytest.raises(InvalidRequest, match="Requested reservation is invalid"):
            await cluster.submit([spec(reservation="nope", time_limit_s=60)])
        with pytest.raises(PermissionDenied, match="Access denied to requested reservation"):
            await cluster.submit([spec(user="bob", reservation="maint", time_limit_s=60)])
        with pytest.raises(InvalidRequest, match="needs a time limit that fits"):
            await cluster.submit([spec(reservation="maint")])
        (ok,) = await cluster.submit([spec(reservation="maint", time_limit_s=600)])
        assert cluster.jobs[ok.job_id].spec.reservation == "maint"

    with_cluster(db_url, body)


def test_an_active_reservation_can_change_while_its_own_jobs_run(db_url: str) -> None:
    async def body(cluster: Cluster) -> None:
        await reservations.create(cluster, ROOT, req(start=T0 - 10, nodes=("node1",)))
        (done,) = await cluster.submit([spec(reservation="maint", time_limit_s=600)])
        job = cluster.jobs[done.job_id]
        alloc = Allocation(("node1",), (ResourceVector(1, 0),))
        cluster.put(job.evolve(state=JobState.RUNNING, start_time=T0, allocation=alloc))
        longer = await reservations.update(
            cluster, ROOT, ReservationRequest("maint", duration=3 * 3600.0)
        )
        assert longer.end == T0 - 10 + 3 * 3600 and longer.active(T0)

    with_cluster(db_url, body)


def test_a_plan_made_before_a_reservation_does_not_start_jobs_into_it(db_url: str) -> None:
    async def body(cluster: Cluster) -> None:
        (a,) = await cluster.submit([spec(user="bob", time_limit_s=7200)])
        (b,) = await cluster.submit([spec(user="bob", time_limit_s=600)])
        one_cpu = (ResourceVector(1, 0),)
        plan = Plan(
            cluster.revision,
            placements=(
                Placement(a.job_id, Allocation(("node1",), one_cpu)),  # runs into it
                Placement(b.job_id, Allocation(("node1",), one_cpu)),  # ends before it
            ),
        )
        # created after the pass read the cluster, before its plan is applied
        await reservations.create(cluster, ROOT, req(nodes=("node1",)))
        started = await cluster.apply_plan(plan)
        assert started == [b.job_id]
        assert cluster.jobs[a.job_id].state is JobState.PENDING

    with_cluster(db_url, body)


def test_submit_refuses_a_limit_longer_than_what_is_left_of_a_one_off_window(
    db_url: str,
) -> None:
    """A job whose limit fits the reservation's duration but not the part of its window
    still to come would wait (reason Reservation) until the reservation ends and then
    for ever: it is refused at submit with the longest limit that still fits. A
    recurring reservation's next window is whole, so there the duration is what counts."""

    async def body(cluster: Cluster) -> None:
        await reservations.create(cluster, ROOT, req(start=T0 - 3600, nodes=("node1",)))
        with pytest.raises(InvalidRequest, match=r"at most 60 minutes \(3600s\)"):
            await cluster.submit([spec(reservation="maint", time_limit_s=5400)])
        (ok,) = await cluster.submit([spec(reservation="maint", time_limit_s=3600)])
        assert cluster.jobs[ok.job_id].spec.reservation == "maint"
        await reservations.create(
            cluster,
            ROOT,
            req("daily", start=T0 - 3600, nodes=("node2",), flags=parse_flags("DAILY")),
        )
        (later,) = await cluster.submit([spec(reservation="daily", time_limit_s=5400)])
        assert cluster.jobs[later.job_id].spec.reservation == "daily"

    with_cluster(db_url, body)


def test_a_plan_made_before_its_reservation_ended_does_not_start_the_job_after(
    db_url: str,
) -> None:
    """A pass planned a job into its reservation; the window closed before the plan was
    applied: the job must not start (it would run outside the reservation)."""

    async def body(cluster: Cluster) -> None:
        await reservations.create(
            cluster, ROOT, req(start=T0 - 10, duration=600.0, nodes=("node1",))
        )
        (a,) = await cluster.submit([spec(reservation="maint", time_limit_s=300)])
        plan = Plan(
            cluster.revision,
            placements=(Placement(a.job_id, Allocation(("node1",), (ResourceVector(1, 0),))),),
        )
        assert isinstance(cluster.clock, VirtualClock)
        cluster.clock.advance(600.0)  # the window [T0-10, T0+590) is over
        assert await cluster.apply_plan(plan) == []
        assert cluster.jobs[a.job_id].state is JobState.PENDING

    with_cluster(db_url, body)


def test_submit_counts_the_users_default_account(db_url: str) -> None:
    """A job naming no account is charged to its user's default account: a reservation
    for that account admits it (Slurm's rule), and refuses another user's."""
    policy = priority_from_dict(
        {
            "accounts": [{"name": "physics"}, {"name": "chem"}],
            "users": [
                {"name": "alice", "default_account": "physics"},
                {"name": "bob", "default_account": "chem"},
            ],
        }
    )

    async def body(cluster: Cluster) -> None:
        await reservations.create(cluster, ROOT, req(users=(), accounts=("physics",)))
        (ok,) = await cluster.submit([spec(reservation="maint", time_limit_s=600)])
        assert cluster.jobs[ok.job_id].spec.reservation == "maint"
        with pytest.raises(PermissionDenied, match="Access denied to requested reservation"):
            await cluster.submit([spec(user="bob", reservation="maint", time_limit_s=600)])

    with_cluster(db_url, body, HalConfig(priority=policy))
