"""A node remembers when its last job ended (``NodeUsage.released_at``), which the
autoscaler counts a group node's idle time from: a job that starts and ends between two
of its passes must not leave the node idle since before the job ran."""

from __future__ import annotations

import asyncio

from hal.core.clock import VirtualClock
from hal.core.states import JobState
from hal.state.cluster import Cluster
from hal.testing import make_job
from hal.testing.mirror import commit, store


def test_a_jobs_end_is_when_its_node_was_released(cluster: Cluster, clock: VirtualClock) -> None:
    running = make_job(1).cpus(2).mem_gib(1).running_on("n1", start=clock.now()).build()
    store(cluster, running.evolve(launched=True))
    assert cluster.usage["n1"].jobs == {1}
    ended_at = clock.now() + 7.5
    ended = cluster.jobs[1].evolve(state=JobState.COMPLETED, end_time=ended_at)
    asyncio.run(commit(cluster, [ended]))
    assert cluster.usage["n1"].jobs == set()
    assert cluster.usage["n1"].released_at == ended_at
