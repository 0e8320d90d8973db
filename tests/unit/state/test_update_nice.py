"""``scontrol update job Nice=`` and ``Priority=`` in the mirror: a user may set their own
job's nice to 0 or more (lower it again too), never below 0, and only lower its priority;
an administrator may do either (Slurm's rules: "Only privileged users can specify a
negative adjustment", "only the Slurm administrator or root can increase job's
priority")."""

from __future__ import annotations

import asyncio

import pytest

from hal.core.errors import PermissionDenied
from hal.state.cluster import Caller, Cluster
from hal.testing import make_job
from hal.testing.mirror import store


def test_a_user_cannot_give_their_own_job_a_negative_nice(cluster: Cluster) -> None:
    job = make_job(1).priority(1000).build()  # alice's
    store(cluster, job.evolve(spec=job.spec.with_changes(nice=0)))
    alice = Caller("alice")
    (raised,) = asyncio.run(cluster.update("1", alice, nice=100))
    assert (raised.spec.nice, raised.priority) == (100, 900)
    (back,) = asyncio.run(cluster.update("1", alice, nice=50))  # lowered, still >= 0
    assert (back.spec.nice, back.priority) == (50, 950)
    with pytest.raises(PermissionDenied, match="only an administrator may give a negative"):
        asyncio.run(cluster.update("1", alice, nice=-1))
    assert cluster.jobs[1].spec.nice == 50  # unchanged
    (lowered,) = asyncio.run(cluster.update("1", Caller("root", admin=True), nice=-10))
    assert (lowered.spec.nice, lowered.priority) == (-10, 1010)


def test_a_user_may_lower_their_own_jobs_priority_but_not_raise_it(cluster: Cluster) -> None:
    """Slurm: only an administrator can increase a job's priority; its owner may lower
    it, and the value is then kept (not recalculated), as an administrator's is."""
    store(cluster, make_job(1).priority(1000).build())  # alice's
    alice = Caller("alice")
    (lowered,) = asyncio.run(cluster.update("1", alice, priority=400))
    assert (lowered.priority, lowered.priority_fixed) == (400, True)
    with pytest.raises(PermissionDenied, match="only an administrator may raise it"):
        asyncio.run(cluster.update("1", alice, priority=401))  # (0 holds it)
    assert cluster.jobs[1].priority == 400
    (raised,) = asyncio.run(cluster.update("1", Caller("root", admin=True), priority=5000))
    assert raised.priority == 5000
