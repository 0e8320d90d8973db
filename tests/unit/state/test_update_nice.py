"""``scontrol update job NICE=`` in the mirror: a user may raise their own job's nice
(lower its priority) but never lower it again; an administrator may (Slurm's rule)."""

from __future__ import annotations

import asyncio

import pytest

from hal.core.errors import PermissionDenied
from hal.state.cluster import Caller, Cluster
from hal.testing import make_job
from hal.testing.mirror import store


def test_a_user_cannot_lower_their_own_nice(cluster: Cluster) -> None:
    job = make_job(1).priority(1000).build()  # alice's
    store(cluster, job.evolve(spec=job.spec.with_changes(nice=0)))
    alice = Caller("alice")
    (raised,) = asyncio.run(cluster.update("1", alice, nice=100))
    assert (raised.spec.nice, raised.priority) == (100, 900)
    with pytest.raises(PermissionDenied, match="only an administrator may lower nice"):
        asyncio.run(cluster.update("1", alice, nice=50))
    assert cluster.jobs[1].spec.nice == 100  # unchanged
    (lowered,) = asyncio.run(cluster.update("1", Caller("root", admin=True), nice=-10))
    assert (lowered.spec.nice, lowered.priority) == (-10, 1010)
