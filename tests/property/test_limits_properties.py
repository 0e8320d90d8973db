"""Quota limits are never exceeded: over random queues, account trees and QoS limits,
no pass places a job that takes a QoS or account (or an ancestor account) over one of
its limits, and no placed job breaks the per-job limits of its QoS, its account or an
ancestor account.

Running jobs of the snapshot may already be over a limit (limits can be lowered while
jobs run); then the pass must add nothing to that group.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hal.core.job import Job
from hal.core.priority import Account, PriorityPolicy, Qos, TresLimits, UserAccount
from hal.core.resources import GiB
from hal.scheduler.framework import ClusterSnapshot
from hal.scheduler.plugins import build_scheduler, default_profile, default_registry
from hal.scheduler.plugins.limits import Limits
from hal.scheduler.plugins.limits.limits import allocation_tres
from hal.testing import cluster, make_job
from hal.testing.examples import examples

USERS = ("alice", "bob", "eve")
QOS = (None, "q1", "q2")
ACCOUNTS = (None, "a", "a1", "b")
PARENTS = {"a": "root", "a1": "a", "b": "root"}
_cap = st.one_of(st.none(), st.integers(0, 6))


@st.composite
def tres_limits(draw: st.DrawFn) -> TresLimits:
    return TresLimits(
        cpus=draw(st.one_of(st.none(), st.integers(0, 24))),
        gpus=draw(st.one_of(st.none(), st.integers(0, 8))),
        mem_bytes=draw(st.one_of(st.none(), st.integers(0, 32).map(lambda g: g * GiB))),
        nodes=draw(st.one_of(st.none(), st.integers(0, 4))),
    )


@st.composite
def policies(draw: st.DrawFn) -> PriorityPolicy:
    qos = tuple(
        Qos(
            name,
            max_jobs_per_user=draw(_cap),
            max_wall_s=draw(st.one_of(st.none(), st.sampled_from([600, 3600]))),
            max_tres_per_job=draw(tres_limits()),
            grp_tres=draw(tres_limits()),
            grp_jobs=draw(_cap),
        )
        for name in ("q1", "q2")
    )
    accounts = tuple(
        Account(
            name,
            parent,
            max_jobs=draw(_cap),
            grp_jobs=draw(_cap),
            grp_tres=draw(tres_limits()),
            max_tres_per_job=draw(tres_limits()),
            max_wall_s=draw(st.one_of(st.none(), st.sampled_from([600, 3600]))),
        )
        for name, parent in PARENTS.items()
    )
    users = tuple(
        UserAccount(u, acct, default=acct == default)
        for u, default in zip(USERS, ("a1", "a", "b"), strict=True)
        for acct in ("a", "a1", "b")
    )
    return PriorityPolicy(accounts=accounts, users=users, qos=qos)


def _job(draw: st.DrawFn, job_id: int) -> Job:
    b = (
        make_job(job_id)
        .user(draw(st.sampled_from(USERS)))
        .cpus(draw(st.integers(1, 4)))
        .gpus(draw(st.integers(0, 2)))
        .mem_gib(draw(st.integers(0, 4)))
        .nodes(draw(st.integers(1, 2)))
        .asked_limit(draw(st.sampled_from([0, 60, 1800, 7200])))
        .priority(draw(st.integers(0, 3)))
    )
    qos = draw(st.sampled_from(QOS))
    if qos:
        b = b.qos(qos)
    account = draw(st.sampled_from(ACCOUNTS))
    if account:
        b = b.account(account)
    if draw(st.integers(0, 5)) == 0:
        b = b.exclusive()
    return b.build()


@st.composite
def cases(draw: st.DrawFn) -> tuple[PriorityPolicy, ClusterSnapshot]:
    builder = cluster().uniform_nodes(4, cpus=8, mem_gib=32, gpus=4)
    for i in range(draw(st.integers(0, 6))):  # 1-CPU jobs: at most 6 on 4x8 CPUs fit
        j = make_job(1000 + i).user(draw(st.sampled_from(USERS))).limit(600)
        qos, account = draw(st.sampled_from(QOS)), draw(st.sampled_from(ACCOUNTS))
        j = j.qos(qos) if qos else j
        j = j.account(account) if account else j
        builder.running(j.running_on(f"n{draw(st.integers(1, 4)):04d}"))
    builder.pending(*(_job(draw, i) for i in range(1, draw(st.integers(0, 14)) + 1)))
    return draw(policies()), builder.build()


def _usage(limits: Limits, jobs: list[Job]) -> dict[tuple[str, ...], list[int]]:
    """group key → [jobs, cpus, gpus, mem, nodes] over ``jobs``."""
    out: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0] * 5)
    for job in jobs:
        assert job.allocation is not None
        tres = allocation_tres(job.allocation)
        qos = job.spec.qos or "normal"
        keys: list[tuple[str, ...]] = [("qos", qos), ("qos-user", qos, job.spec.user)]
        acct: str | None = limits.account_of(job)
        while acct in PARENTS:
            keys += [("acct", acct), ("acct-user", acct, job.spec.user)]
            acct = PARENTS[acct]
        for key in keys:
            row = out[key]
            row[0] += 1
            for i, v in enumerate(tres):
                row[i + 1] += v
    return out


def _caps(policy: PriorityPolicy, key: tuple[str, ...]) -> list[int | None]:
    """[jobs, cpus, gpus, mem, nodes] caps of a group (None: none)."""
    kind, name = key[0], key[1]
    qos = {q.name: q for q in policy.qos}
    accts = {a.name: a for a in policy.accounts}
    if kind.startswith("qos") and name not in qos:
        return [None] * 5
    if kind == "qos":
        t = qos[name].grp_tres
        return [qos[name].grp_jobs, t.cpus, t.gpus, t.mem_bytes, t.nodes]
    if kind == "qos-user":
        return [qos[name].max_jobs_per_user, None, None, None, None]
    if kind == "acct":
        t = accts[name].grp_tres
        return [accts[name].grp_jobs, t.cpus, t.gpus, t.mem_bytes, t.nodes]
    return [accts[name].max_jobs, None, None, None, None]


def _per_job_caps(
    policy: PriorityPolicy, limits: Limits, job: Job
) -> list[tuple[str, TresLimits, int | None]]:
    """The per-job limits ``job`` must keep, (whose, MaxTRES, MaxWall): its QoS's
    MaxTRESPerJob and MaxWall, its account's and every ancestor's MaxTRES and MaxWall."""
    out: list[tuple[str, TresLimits, int | None]] = []
    for q in policy.qos:
        if q.name == (job.spec.qos or "normal"):
            out.append((f"qos {q.name}", q.max_tres_per_job, q.max_wall_s))
    accts = {a.name: a for a in policy.accounts}
    acct: str | None = limits.account_of(job)
    while acct in PARENTS:
        a = accts[acct]
        out.append((f"account {acct}", a.max_tres_per_job, a.max_wall_s))
        acct = PARENTS[acct]
    return out


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_quota_limits_are_never_exceeded(case: tuple[PriorityPolicy, ClusterSnapshot]) -> None:
    policy, snap = case
    sched = build_scheduler(default_profile(limits=True), default_registry(policy=policy))
    plan = sched.schedule(snap)
    limits = Limits(policy)
    pending = {j.id: j for j in snap.pending}
    placed = [pending[p.job_id].evolve(allocation=p.allocation) for p in plan.placements]
    before = _usage(limits, list(snap.running))
    after = _usage(limits, [*snap.running, *placed])
    grew = Counter(k for k in after if after[k][0] > before.get(k, [0])[0])
    for key in grew:
        for i, cap in enumerate(_caps(policy, key)):
            if cap is not None:
                assert after[key][i] <= cap, (key, i, after[key], cap)
    for job in placed:
        assert job.allocation is not None
        _, gpus, mem, nodes = allocation_tres(job.allocation)
        n = job.spec.nodes_min
        # MaxTRES cpus, gpus and mem are checked on the request: an --exclusive job holds
        # its nodes' every CPU and GPU, whatever it asked for; a --mem=0 job asks for its
        # nodes' whole memory, so what it got is what it asked
        if job.spec.exclusive:
            gpus = job.spec.request_per_node(n).gpus * n
        if job.spec.memory_per_node_bytes != 0:
            mem = job.spec.request_per_node(n).memory_bytes * n
        cpus = job.spec.cpus_per_node(n) * n
        for whose, per, wall in _per_job_caps(policy, limits, job):
            if wall is not None and job.spec.time_limit_s is not None:  # -t (only)
                assert 0 < job.time_limit_s <= wall, (whose, job.time_limit_s, wall)
            for have, cap in ((cpus, per.cpus), (gpus, per.gpus), (mem, per.mem_bytes)):
                assert cap is None or have <= cap, (whose, have, cap)
            assert per.nodes is None or nodes <= per.nodes, (whose, nodes, per.nodes)
