"""``scontrol top`` in the mirror, replaying what Slurm 22.05.8 did on its peer
(docs/slurm-checks.md): the listed jobs take the set's highest priorities in
the order listed, the owner's other jobs of that partition, account and QoS are lowered
evenly by what they gained (the last one the remainder), each through its nice."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from hal.core.errors import Conflict, NotFound, PermissionDenied
from hal.core.states import JobState
from hal.state.cluster import Caller, Cluster
from hal.state.job_top import set_top
from hal.testing import make_job
from hal.testing.mirror import store

ROOT = Caller("root", admin=True)
BASE = 4_294_901_000  # Slurm's priority/basic numbers, less this, as squeue showed them


def priorities(cluster: Cluster) -> dict[int, tuple[int, int]]:
    pending = (j for j in cluster.jobs.values() if j.state is JobState.PENDING)
    return {j.id: (j.priority - BASE, j.spec.nice) for j in pending}


def jobs(cluster: Cluster, *rows: tuple[int, int, int]) -> None:
    """(id, priority less BASE, nice) each, alice's, in the one partition."""
    for job_id, priority, nice in rows:
        job = make_job(job_id).priority(BASE + priority).build()
        store(cluster, job.evolve(spec=job.spec.with_changes(nice=nice)))


def test_the_listed_jobs_go_first_and_the_others_pay_for_it_evenly(cluster: Cluster) -> None:
    jobs(cluster, (2, 758, 0), (3, 757, 0), (4, 756, 0), (5, 655, 100), (6, 754, 0))
    changed = asyncio.run(set_top(cluster, "5,6", ROOT))
    assert sorted(changed) == [2, 3, 4, 5, 6]
    assert priorities(cluster) == {
        5: (758, -3),
        6: (757, -3),
        2: (723, 35),
        3: (722, 35),
        4: (720, 36),
    }
    asyncio.run(set_top(cluster, "3", ROOT))
    assert priorities(cluster) == {
        3: (758, -1),
        5: (749, 6),
        6: (748, 6),
        2: (714, 44),
        4: (711, 45),
    }


def test_jobs_unlike_the_first_or_held_are_passed_over(cluster: Cluster) -> None:
    jobs(cluster, (2, 758, 0), (6, 754, 0))
    other = make_job(3).priority(BASE + 757).partition("p2").build()
    bobs = make_job(4).user("bob").priority(BASE + 756).build()
    held = make_job(8).priority(BASE + 700).admin_hold().build()
    for job in (other, bobs, held):
        store(cluster, job)
    assert sorted(asyncio.run(set_top(cluster, "6,3,4,8", ROOT))) == [2, 6]
    assert priorities(cluster) == {
        2: (754, 4),
        3: (757, 0),
        4: (756, 0),
        6: (758, -4),
        8: (700, 0),
    }
    with pytest.raises(Conflict, match=r"^Job is in held state"):
        asyncio.run(set_top(cluster, "8", ROOT))


def test_a_bad_job_in_the_list_changes_nothing(cluster: Cluster) -> None:
    jobs(cluster, (2, 758, 0), (6, 754, 0))
    store(cluster, make_job(1).state(JobState.RUNNING).build())
    store(cluster, make_job(7).partitions("debug", "p2").build())
    before = priorities(cluster)
    with pytest.raises(NotFound, match=r"^Invalid job id specified"):
        asyncio.run(set_top(cluster, "6,99", ROOT))
    for listed in ("6,", "abc", "6_1", "6 2", "2_[1-2]", ""):
        with pytest.raises(NotFound, match=r"^Invalid job id specified"):
            asyncio.run(set_top(cluster, listed, ROOT))
    with pytest.raises(Conflict, match=r"^Job is no longer pending execution"):
        asyncio.run(set_top(cluster, "6,1", ROOT))
    with pytest.raises(Conflict, match=r"^Requested partition configuration not available"):
        asyncio.run(set_top(cluster, "7", ROOT))
    assert priorities(cluster) == before


def test_users_move_only_their_own_jobs_and_only_when_allowed(cluster: Cluster) -> None:
    jobs(cluster, (2, 758, 0), (6, 754, 0))
    store(cluster, make_job(4).user("bob").priority(BASE + 756).build())
    alice = Caller("alice")
    with pytest.raises(PermissionDenied, match=r"^Access/permission denied"):
        asyncio.run(set_top(cluster, "6", alice))  # (Slurm's default: even her own)
    cluster.config = dataclasses.replace(cluster.config, enable_user_top=True)
    with pytest.raises(PermissionDenied, match=r"^Access/permission denied"):
        asyncio.run(set_top(cluster, "6,4", alice))
    assert asyncio.run(set_top(cluster, "6", alice)) == [6, 2]
    assert priorities(cluster)[6] == (758, -4)


def test_equal_priorities_still_put_the_listed_job_first(cluster: Cluster) -> None:
    """HAL's basic priorities are equal (Slurm's never are): the listed job is raised one
    above the others, which pay for it, so the queue's order changes as asked."""
    jobs(cluster, (2, 500, 0), (3, 500, 0), (4, 500, 0))
    asyncio.run(set_top(cluster, "4,3", ROOT))
    assert priorities(cluster) == {4: (502, -2), 3: (501, -1), 2: (497, 3)}
