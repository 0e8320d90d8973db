"""The reservation plugin in the default profile: who may use reserved nodes, when."""

from __future__ import annotations

import dataclasses

from hal.config.priority import priority_from_dict
from hal.core.job import Job
from hal.core.reservation import Reservation, parse_flags
from hal.core.states import PendingReason
from hal.scheduler.framework import ClusterSnapshot, PassContext
from hal.scheduler.framework.explain import diagnose
from hal.scheduler.framework.runtime import WillRunResult
from hal.scheduler.plugins import build_scheduler, default_registry
from hal.testing import cluster, make_job, make_node
from hal.testing.builders import JobBuilder
from hal.testing.harness import placed_nodes, reasons

NOW = 1_000_000.0
N1, N2 = "n0001", "n0002"
SCHED = build_scheduler()


def resv(start: float = NOW - 10, end: float = NOW + 3600, **kw: object) -> Reservation:
    base: dict[str, object] = {
        "name": "maint",
        "start": start,
        "end": end,
        "nodes": (N1,),
        "users": ("alice",),
    }
    base.update(kw)
    return Reservation(**base)  # type: ignore[arg-type]


def in_resv(b: JobBuilder, name: str = "maint") -> Job:
    job = b.build()
    return dataclasses.replace(job, spec=job.spec.with_changes(reservation=name))


def snap(
    *pending: Job | JobBuilder, r: tuple[Reservation, ...], running: tuple[Job, ...] = ()
) -> ClusterSnapshot:
    s = cluster(NOW).uniform_nodes(2, cpus=4).pending(*pending).running(*running).build()
    return dataclasses.replace(s, reservations=r)


def test_ordinary_jobs_stay_off_an_active_reservation() -> None:
    jobs = [make_job(i).cpus(4).user("bob").limit(600) for i in (1, 2)]
    plan = SCHED.schedule(snap(*jobs, r=(resv(),)))
    assert placed_nodes(plan) == {1: (N2,)}
    assert reasons(plan) == {2: PendingReason.RESOURCES}


def test_a_reservation_job_runs_only_on_its_nodes() -> None:
    jobs = [in_resv(make_job(i).cpus(2).user("alice").limit(600)) for i in (1, 2, 3)]
    plan = SCHED.schedule(snap(*jobs, r=(resv(),)))
    assert placed_nodes(plan) == {1: (N1,), 2: (N1,)}
    assert reasons(plan) == {3: PendingReason.RESERVATION}


def test_a_busy_reservation_holds_back_nobody_outside_it() -> None:
    """The reservation job first in the queue waits for its busy node with reason
    Reservation; it does not block the partition, so the ordinary job behind starts."""
    busy = make_job(50).cpus(4).user("alice").running_on(N1, start=NOW - 5).build()
    first = in_resv(make_job(1).cpus(1).user("alice").priority(100).limit(60))
    second = make_job(2).cpus(1).user("bob").limit(60)
    plan = SCHED.schedule(snap(first, second, r=(resv(),), running=(busy,)))
    assert placed_nodes(plan) == {2: (N2,)}
    assert reasons(plan) == {1: PendingReason.RESERVATION}


def test_a_future_reservation_keeps_out_jobs_whose_limit_crosses_its_start() -> None:
    r = resv(start=NOW + 600, end=NOW + 1200)
    short = make_job(1).cpus(4).user("bob").nodelist(N1).limit(600)  # ends at the start
    long = make_job(2).cpus(4).user("bob").nodelist(N1).limit(601)
    unlimited = make_job(3).cpus(4).user("bob").nodelist(N1)
    assert placed_nodes(SCHED.schedule(snap(short, r=(r,)))) == {1: (N1,)}
    for job in (long, unlimited):
        plan = SCHED.schedule(snap(job, r=(r,)))
        assert placed_nodes(plan) == {}


def test_a_reservation_job_waits_for_the_window_and_must_fit_in_it() -> None:
    r = resv(start=NOW + 600, end=NOW + 1200)
    early = in_resv(make_job(1).cpus(1).user("alice").limit(60))
    plan = SCHED.schedule(snap(early, r=(r,)))
    assert placed_nodes(plan) == {} and reasons(plan) == {1: PendingReason.RESERVATION}
    too_long = in_resv(make_job(2).cpus(1).user("alice").limit(7200))
    plan = SCHED.schedule(snap(too_long, r=(resv(),)))
    assert reasons(plan) == {2: PendingReason.RESERVATION}
    status = SCHED.run_pass(snap(too_long, r=(resv(),))).statuses[2]
    assert "runs past the end of reservation maint" in status.message


def test_strangers_and_unknown_reservations_wait_with_reason_reservation() -> None:
    stranger = in_resv(make_job(1).cpus(1).user("bob").limit(60))
    unknown = in_resv(make_job(2).cpus(1).user("alice").limit(60), "nope")
    result = SCHED.run_pass(snap(stranger, unknown, r=(resv(),)))
    assert reasons(result.plan) == {1: PendingReason.RESERVATION, 2: PendingReason.RESERVATION}
    assert "may not use reservation maint" in result.statuses[1].message
    assert "does not exist" in result.statuses[2].message


def test_maintenance_gives_its_own_reason() -> None:
    r = resv(flags=parse_flags("MAINT"), nodes=(N1, N2))
    plan = SCHED.schedule(snap(make_job(1).cpus(1).user("bob").limit(60), r=(r,)))
    assert reasons(plan) == {1: PendingReason.RESERVED_FOR_MAINTENANCE}


def test_a_daily_reservation_blocks_its_next_window_too() -> None:
    # the window ended an hour ago; the next one starts in 23 hours
    r = resv(start=NOW - 7200, end=NOW - 3600, flags=parse_flags("DAILY"))
    ok = make_job(1).cpus(4).user("bob").nodelist(N1).limit(3600)
    unlimited = make_job(2).cpus(4).user("bob").nodelist(N1)
    assert placed_nodes(SCHED.schedule(snap(ok, r=(r,)))) == {1: (N1,)}
    assert placed_nodes(SCHED.schedule(snap(unlimited, r=(r,)))) == {}


def test_backfill_plans_a_blocked_job_after_the_window() -> None:
    r = resv(start=NOW + 100, end=NOW + 200, nodes=(N1, N2))
    job = make_job(1).cpus(1).user("bob").limit(300)
    result = SCHED.run_pass(snap(job, r=(r,)))
    assert placed_nodes(result.plan) == {}
    (update,) = result.plan.updates
    assert update.reason is PendingReason.RESOURCES
    assert update.expected_start == NOW + 200


def test_no_reservations_means_the_plugin_skips() -> None:
    s = snap(make_job(1).cpus(1).limit(60), r=())
    assert placed_nodes(SCHED.schedule(s)) == {1: (N1,)}


def test_explain_names_the_reservation() -> None:
    s = snap(make_job(1).cpus(1).user("bob").nodelist(N1).limit(60), r=(resv(),))
    diag = diagnose(SCHED.framework, PassContext.from_snapshot(s), s.pending[0])
    assert ("reservation", "reserved (maint)", 1) in diag.rejections


def test_a_reservation_job_is_not_held_behind_its_partitions_blocked_head() -> None:
    # job 1 (ordinary, highest priority) needs both nodes and waits; the reservation job
    # behind it starts on the reserved node in the main pass, not only at the next backfill
    head = make_job(1).cpus(4).nodes(2).user("bob").limit(600).priority(10)
    mine = in_resv(make_job(2).cpus(2).user("alice").limit(600).priority(1))
    scheduler = build_scheduler(
        {"plugins": ["priority", "hold", "partition", "reservation", "noderesources"]}
    )
    plan = scheduler.schedule(snap(head, mine, r=(resv(),)))
    assert placed_nodes(plan) == {2: (N1,)}
    assert reasons(plan) == {1: PendingReason.RESOURCES}


def test_test_only_finds_the_start_after_a_reservation_ends() -> None:
    # both nodes reserved for maintenance, nothing running: the earliest start is the
    # reservation's end (sbatch --test-only, hal explain)
    maint = resv(nodes=(N1, N2), users=("root",), flags=parse_flags("MAINT"))
    job = make_job(1).cpus(4).user("bob").limit(600).build()
    result = SCHED.will_run(snap(job, r=(maint,)), job)
    assert isinstance(result, WillRunResult), result
    assert result.start_time == NOW + 3600


def test_a_job_waiting_for_its_reservation_expects_its_start() -> None:
    later = resv(start=NOW + 1800, end=NOW + 5400)
    job = in_resv(make_job(1).cpus(2).user("alice").limit(600))
    plan = SCHED.schedule(snap(job, r=(later,)))
    (update,) = plan.updates
    assert update.reason is PendingReason.RESERVATION
    assert update.expected_start == NOW + 1800


def test_a_job_without_account_uses_its_users_default_account() -> None:
    """Accounts=physics admits alice's job that names no account when physics is her
    default account (the job is charged to it, as in Slurm); not bob's (chem)."""
    policy = priority_from_dict(
        {
            "accounts": [{"name": "physics"}, {"name": "chem"}],
            "users": [
                {"name": "alice", "default_account": "physics"},
                {"name": "bob", "default_account": "chem"},
            ],
        }
    )
    scheduler = build_scheduler(registry=default_registry(policy=policy))
    r = resv(users=(), accounts=("physics",))
    alice = in_resv(make_job(1).cpus(1).user("alice").limit(60))
    bob = in_resv(make_job(2).cpus(1).user("bob").limit(60))
    plan = scheduler.schedule(snap(alice, bob, r=(r,)))
    assert placed_nodes(plan) == {1: (N1,)}
    assert reasons(plan) == {2: PendingReason.RESERVATION}


def test_maintenance_is_the_reason_when_only_its_nodes_would_do() -> None:
    """Slurm 22.05.8 gives ``ReqNodeNotAvail, Reserved for maintenance`` to a job that
    only a MAINT reservation keeps from running: ``-c 4`` where only the reserved node
    has 4 CPUs, ``-w`` naming it. HAL said ``Resources`` (the resource filter, after
    this one, made the count fall short) and ``Priority`` (an admin's run)."""
    s = cluster(NOW).nodes(make_node(N1).cpus(4), make_node(N2).cpus(2))
    wide = make_job(1).cpus(4).user("bob").limit(60)
    named = make_job(2).cpus(1).user("bob").limit(60).nodelist(N1)
    snapshot = dataclasses.replace(
        s.pending(wide, named).build(), reservations=(resv(flags=parse_flags("MAINT")),)
    )
    plan = SCHED.schedule(snapshot)
    maint = PendingReason.RESERVED_FOR_MAINTENANCE
    assert reasons(plan) == {1: maint, 2: maint}


def test_a_job_short_of_resources_anyway_keeps_reason_resources() -> None:
    busy = tuple(
        make_job(9 + i).cpus(2).user("carol").limit(6000).running_on(n).build()
        for i, n in enumerate((N1, N2))
    )
    r = resv(flags=parse_flags("MAINT"))
    plan = SCHED.schedule(snap(make_job(1).cpus(4).user("bob").limit(60), r=(r,), running=busy))
    assert reasons(plan) == {1: PendingReason.RESOURCES}
