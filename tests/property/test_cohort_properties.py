"""Cohort lending never creates quota: over random cohorts, limits and queues, replaying
a pass's placements in order, each one either keeps its account within its own GrpTRES
or borrows at most its borrow limit, and only what the other members leave unused at
that moment (what all members use above their own GrpTRES stays within what the others
leave unused). An account outside a cohort never goes above its GrpTRES."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.job import Job
from hal.core.priority import Account, PriorityPolicy, TresLimits, UserAccount
from hal.scheduler.framework import ClusterSnapshot
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.testing import cluster, make_job
from hal.testing.examples import examples

USERS = {"alice": "a", "bob": "b", "carl": "c", "xena": "x"}
COHORT = ("a", "b", "c")
RES = ("cpus", "gpus")


@st.composite
def policies(draw: st.DrawFn) -> PriorityPolicy:
    def caps() -> TresLimits:
        return TresLimits(
            cpus=draw(st.integers(0, 16)), gpus=draw(st.one_of(st.none(), st.integers(0, 4)))
        )

    def borrow() -> TresLimits:
        return TresLimits(cpus=draw(st.one_of(st.none(), st.integers(0, 8))))

    accounts = tuple(
        Account(n, grp_tres=caps(), cohort="c1", borrow_limit=borrow()) for n in COHORT
    )
    return PriorityPolicy(
        accounts=(*accounts, Account("x", grp_tres=caps())),
        users=tuple(UserAccount(u, a, default=True) for u, a in USERS.items()),
    )


@st.composite
def snapshots(draw: st.DrawFn) -> ClusterSnapshot:
    builder = cluster().uniform_nodes(6, cpus=8, gpus=2)
    for i in range(draw(st.integers(0, 5))):
        job = (
            make_job(500 + i)
            .user(draw(st.sampled_from(sorted(USERS))))
            .cpus(draw(st.integers(1, 4)))
        )
        builder.running(job.limit(600).running_on(f"n{i + 1:04d}"))
    for i in range(1, draw(st.integers(1, 12)) + 1):
        builder.pending(
            make_job(i)
            .user(draw(st.sampled_from(sorted(USERS))))
            .cpus(draw(st.integers(1, 6)))
            .gpus(draw(st.integers(0, 1)))
            .limit(600)
            .priority(draw(st.integers(0, 5)))
        )
    return builder.build()


def _tres(job: Job) -> dict[str, int]:
    assert job.allocation is not None
    total = job.allocation.total()
    return {"cpus": total.cpus, "gpus": total.gpus}


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policies(), snapshots())
def test_lending_never_creates_quota(policy: PriorityPolicy, snap: ClusterSnapshot) -> None:
    scheduler = build_scheduler(
        default_profile(limits=True, backfill=False), default_registry(policy=policy)
    )
    plan = scheduler.schedule(snap)
    accounts = {a.name: a for a in policy.accounts}
    used = {name: {r: 0 for r in RES} for name in accounts}
    for job in snap.running:
        for r, v in _tres(job).items():
            used[USERS[job.spec.user]][r] += v
    pending = {j.id: j for j in snap.pending}
    for placement in plan.placements:
        job = pending[placement.job_id].evolve(allocation=placement.allocation)
        name = USERS[job.spec.user]
        acct = accounts[name]
        before = {m: dict(u) for m, u in used.items()}
        for r, v in _tres(job).items():
            used[name][r] += v
        for r in RES:
            cap = getattr(acct.grp_tres, r)
            if cap is None or used[name][r] <= cap or used[name][r] <= before[name][r]:
                continue  # within its own quota (or this resource did not grow)
            assert acct.cohort, (name, r, used[name][r], cap)
            extra = getattr(acct.borrow_limit, r)
            assert extra is None or used[name][r] <= cap + extra
            members = [accounts[m] for m in COHORT if getattr(accounts[m].grp_tres, r) is not None]
            over = sum(max(0, used[m.name][r] - getattr(m.grp_tres, r)) for m in members)
            spare = sum(max(0, getattr(m.grp_tres, r) - used[m.name][r]) for m in members)
            assert over <= spare, (name, r, used, policy)
