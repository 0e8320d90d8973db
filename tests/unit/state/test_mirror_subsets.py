"""The mirror's id sets (pending, active, with a preemption grace time running) follow
each job it is given, so the scans each second read them instead of the whole queue."""

from __future__ import annotations

from hal.core.clock import VirtualClock
from hal.core.preemption import GRACE_END
from hal.core.states import JobState
from hal.state.cluster import Cluster
from hal.testing.builders import make_job


def subsets(cluster: Cluster) -> tuple[set[int], set[int], set[int]]:
    return cluster.pending_ids, cluster.active_ids, cluster.graced


def test_the_sets_follow_a_job_from_the_queue_to_its_end(
    cluster: Cluster, clock: VirtualClock
) -> None:
    t = clock.now()
    job = make_job(1).build()
    cluster.put(job)
    assert subsets(cluster) == ({1}, set(), set())
    running = make_job(1).running_on("n1", start=t).build()
    cluster.put(running)
    assert subsets(cluster) == (set(), {1}, set())
    graced = running.evolve(extra={**running.extra, GRACE_END: repr(t + 30)})
    cluster.put(graced)
    assert subsets(cluster) == (set(), {1}, {1})
    cluster.put(graced.evolve(state=JobState.COMPLETING))
    assert subsets(cluster) == (set(), {1}, {1})
    cluster.put(graced.evolve(state=JobState.PREEMPTED, end_time=t + 30))
    assert subsets(cluster) == (set(), set(), set())
    assert cluster.has_pending() is False


def test_has_pending_leaves_held_jobs_out(cluster: Cluster) -> None:
    cluster.put(make_job(1).build().evolve(held_by_admin=True))
    assert cluster.pending_ids == {1} and cluster.has_pending() is False
    cluster.put(make_job(2).build())
    assert cluster.has_pending() is True
