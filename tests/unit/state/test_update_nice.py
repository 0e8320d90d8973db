"""``scontrol update job Nice=`` and ``Priority=`` in the mirror: a user may set their own
job's nice to 0 or more (lower it again too), never below 0, and only lower its priority;
an administrator may do either (Slurm's rules: "Only privileged users can specify a
negative adjustment", "only the Slurm administrator or root can increase job's
priority")."""

from __future__ import annotations

import asyncio

import pytest

from hal.core.errors import Conflict, InvalidRequest, PermissionDenied
from hal.core.states import JobState
from hal.state import commands
from hal.state.cluster import Caller, Cluster
from hal.testing import make_job
from hal.testing.mirror import store


def test_a_user_cannot_give_their_own_job_a_negative_nice(cluster: Cluster) -> None:
    job = make_job(1).priority(1000).build()  # alice's
    store(cluster, job.evolve(spec=job.spec.with_changes(nice=0)))
    alice = Caller("alice")
    (raised,) = asyncio.run(commands.update(cluster, "1", alice, nice=100))
    assert (raised.spec.nice, raised.priority) == (100, 900)
    (back,) = asyncio.run(commands.update(cluster, "1", alice, nice=50))  # lowered, still >= 0
    assert (back.spec.nice, back.priority) == (50, 950)
    with pytest.raises(PermissionDenied, match="only an administrator may give a negative"):
        asyncio.run(commands.update(cluster, "1", alice, nice=-1))
    assert cluster.jobs[1].spec.nice == 50  # unchanged
    (lowered,) = asyncio.run(commands.update(cluster, "1", Caller("root", admin=True), nice=-10))
    assert (lowered.spec.nice, lowered.priority) == (-10, 1010)


def test_a_user_may_not_set_their_own_jobs_priority(cluster: Cluster) -> None:
    """Slurm 22.05.8 (docs/slurm-checks.md): an owner lowering his job's priority is
    refused with "Changes to job priority are not persistent, change nice instead" and
    the priority stays; raising it is "Access/permission denied"; an administrator may
    set either way."""
    store(cluster, make_job(1).priority(1000).build())  # alice's
    alice = Caller("alice")
    with pytest.raises(InvalidRequest, match=r"^Changes to job priority are not persistent"):
        asyncio.run(commands.update(cluster, "1", alice, priority=400))
    assert (cluster.jobs[1].priority, cluster.jobs[1].priority_fixed) == (1000, False)
    with pytest.raises(PermissionDenied, match="only an administrator may raise it"):
        asyncio.run(commands.update(cluster, "1", alice, priority=1001))
    (same,) = asyncio.run(commands.update(cluster, "1", alice, priority=1000))  # accepted, as Slurm
    assert same.priority == 1000
    (raised,) = asyncio.run(
        commands.update(cluster, "1", Caller("root", admin=True), priority=5000)
    )
    assert raised.priority == 5000
    (lowered,) = asyncio.run(commands.update(cluster, "1", Caller("root", admin=True), priority=10))
    assert (lowered.priority, lowered.priority_fixed) == (10, True)


@pytest.mark.parametrize("admin_hold", [False, True])
def test_the_priority_of_a_held_job_does_not_change(cluster: Cluster, admin_hold: bool) -> None:
    """Slurm 22.05.8: ``update Priority=500`` of a held job, by root or its owner, is
    refused "Job is in held state, pending scheduler release"; the job stays held."""
    builder = make_job(1).priority(1000)
    store(cluster, (builder.admin_hold() if admin_hold else builder.hold()).build())
    for caller in (Caller("root", admin=True), Caller("alice")):
        with pytest.raises(Conflict, match=r"^Job is in held state, pending scheduler release"):
            asyncio.run(commands.update(cluster, "1", caller, priority=500))
        assert cluster.jobs[1].held and cluster.jobs[1].priority == 1000


def test_an_administrators_priority_clears_the_nice(cluster: Cluster) -> None:
    """scontrol.1: "Explicitly setting a job's priority clears any previously set nice
    value"; seen on Slurm 22.05.8 (priority/basic): a ``--nice=50`` job reads
    ``Priority=777 Nice=0`` after root's ``update Priority=777``. A hold (0) keeps it."""
    job = make_job(1).priority(950).build()
    store(cluster, job.evolve(spec=job.spec.with_changes(nice=50)))
    root = Caller("root", admin=True)
    (held,) = asyncio.run(commands.update(cluster, "1", Caller("alice"), priority=0))
    assert held.spec.nice == 50
    asyncio.run(commands.set_hold(cluster, "1", root, False))
    (fixed,) = asyncio.run(commands.update(cluster, "1", root, priority=777))
    assert (fixed.priority, fixed.spec.nice) == (777, 0)


@pytest.mark.parametrize(
    "change",
    [
        {"nice": -5},
        {"nice": 5},
        {"priority": 5},
        {"priority": 0},
        {"name": "x"},
        {"comment": "c"},
        {"requeue": False},
        {"partition": "debug"},
        {"time_limit_seconds": 300},
    ],
)
def test_nothing_of_an_ended_job_changes(cluster: Cluster, change: dict[str, object]) -> None:
    """Slurm 22.05.8 refuses every update of an ended job with "Job has already finished
    for job N" (its peer); HAL took Nice=, Priority=, JobName=, Comment= and
    Requeue= silently, and said other things for Partition= and TimeLimit=."""
    store(cluster, make_job(2).priority(1000).state(JobState.CANCELLED).build())
    with pytest.raises(Conflict, match=r"^Job has already finished for job 2$"):
        asyncio.run(commands.update(cluster, "2", Caller("root", admin=True), **change))
    job = cluster.jobs[2]
    assert (job.spec.nice, job.priority, job.spec.name) == (0, 1000, make_job(2).build().spec.name)
