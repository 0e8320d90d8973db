"""Lending quota between accounts of a cohort (like Kueue's), and taking it back.

Accounts ``a`` and ``b`` form cohort ``c``, each with GrpTRES cpus=8 (so 16 between
them); ``x`` stands alone with cpus=8. The cluster has 4 nodes x 8 CPUs."""

from __future__ import annotations

from hal.core.preemption import PreemptionPolicy
from hal.core.priority import NO_TRES_LIMITS, Account, PriorityPolicy, TresLimits, UserAccount
from hal.core.states import PendingReason as R
from hal.scheduler.framework.scheduler import PassResult
from hal.scheduler.framework.snapshot import Preemption
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.testing import JobBuilder, cluster, make_job

NOW = 1_000_000.0


def policy(borrow: TresLimits = NO_TRES_LIMITS) -> PriorityPolicy:
    return PriorityPolicy(
        accounts=(
            Account("a", grp_tres=TresLimits(cpus=8), cohort="c", borrow_limit=borrow),
            Account("b", grp_tres=TresLimits(cpus=8), cohort="c"),
            Account("x", grp_tres=TresLimits(cpus=8)),
        ),
        users=(
            UserAccount("alice", "a", default=True),
            UserAccount("bob", "b", default=True),
            UserAccount("xena", "x", default=True),
        ),
    )


def job(job_id: int, user: str, cpus: int = 8) -> JobBuilder:
    return make_job(job_id).user(user).cpus(cpus).limit(3600).priority(100 - job_id)


def run(
    pol: PriorityPolicy, *pending: JobBuilder, running: tuple[JobBuilder, ...] = ()
) -> PassResult:
    scheduler = build_scheduler(
        default_profile(limits=True, preemption=pol.has_cohorts, backfill=False),
        default_registry(policy=pol, preemption_policy=PreemptionPolicy()),
    )
    snap = cluster(NOW).uniform_nodes(4, cpus=8).pending(*pending).running(*running)
    return scheduler.run_pass(snap.build())


def placed(result: PassResult) -> list[int]:
    return sorted(p.job_id for p in result.plan.placements)


def test_an_account_borrows_what_its_cohort_leaves_unused() -> None:
    result = run(policy(), job(1, "alice"), job(2, "alice"), job(3, "alice"))
    # a's own 8 CPUs, then b's unused 8; the third would create quota: held
    assert placed(result) == [1, 2]
    assert result.statuses[3].reason is R.ASSOC_GRP_CPU


def test_an_account_outside_a_cohort_borrows_nothing() -> None:
    result = run(policy(), job(1, "xena"), job(2, "xena"))
    assert placed(result) == [1]
    assert result.statuses[2].reason is R.ASSOC_GRP_CPU


def test_the_borrow_limit_caps_what_is_borrowed() -> None:
    result = run(
        policy(TresLimits(cpus=4)), job(1, "alice"), job(2, "alice", 4), job(3, "alice", 4)
    )
    assert placed(result) == [1, 2]
    assert result.statuses[3].reason is R.ASSOC_GRP_CPU


def test_quota_in_use_by_its_owner_is_not_lent() -> None:
    running = (job(10, "bob", 4).running_on("n0001", start=NOW - 60),)
    result = run(policy(), job(1, "alice"), job(2, "alice", 4), job(3, "alice", 4), running=running)
    # b uses 4 of its 8: a may borrow the other 4 only
    assert placed(result) == [1, 2]
    assert result.statuses[3].reason is R.ASSOC_GRP_CPU


def test_the_owner_takes_its_quota_back_from_a_borrower() -> None:
    # a borrowed b's quota and the cluster is full; bob's job is within b's own quota
    running = (
        job(10, "alice").running_on("n0001", start=NOW - 600),
        job(11, "alice").running_on("n0002", start=NOW - 60),
        job(12, "xena").running_on("n0003", start=NOW - 60),
        make_job(13).user("carol").cpus(8).limit(3600).running_on("n0004", start=NOW - 60),
    )
    result = run(policy(), job(1, "bob"), running=running)
    # one of a's jobs goes (the younger: less work lost); xena and carol are not in the cohort
    assert result.plan.preemptions == (Preemption(11, 1, "requeue", 0.0),)
    assert result.statuses[1].reason is R.RESOURCES


def test_a_job_that_would_itself_borrow_reclaims_nothing() -> None:
    running = (
        job(10, "alice").running_on("n0001", start=NOW - 600),
        job(11, "alice").running_on("n0002", start=NOW - 60),
        job(12, "bob").running_on("n0003", start=NOW - 60),
        job(13, "xena").running_on("n0004", start=NOW - 60),
    )
    # b already uses its own 8: a second b job would borrow, and a holds the rest
    result = run(policy(), job(1, "bob"), running=running)
    assert result.plan.preemptions == ()
    assert result.statuses[1].reason is R.ASSOC_GRP_CPU


def test_a_member_within_its_quota_is_never_reclaimed() -> None:
    running = (
        job(10, "alice").running_on("n0001", start=NOW - 600),
        make_job(12).user("carol").cpus(8).limit(3600).running_on("n0002"),
        make_job(13).user("carol").cpus(8).limit(3600).running_on("n0003"),
        make_job(14).user("carol").cpus(8).limit(3600).running_on("n0004"),
    )
    result = run(policy(), job(1, "bob"), running=running)
    assert result.plan.preemptions == ()
