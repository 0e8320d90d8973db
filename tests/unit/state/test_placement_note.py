"""A placement's note (why the scheduler chose the job's nodes: the traffic graph) is
kept with the started job across a restart, shown by ``hal explain`` and ``hal show``,
and dropped when the job is requeued or started again without one."""

from __future__ import annotations

import asyncio

from hal.api.convert import job_info
from hal.cli.show import job_lines
from hal.core.clock import VirtualClock
from hal.core.job import Allocation
from hal.core.resources import ResourceVector
from hal.core.states import JobState
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.server.explain import _detail
from hal.state.cluster import Cluster
from hal.state.job_changes import PLACEMENT_NOTE, requeued
from hal.testing import make_job
from hal.testing.mirror import new_cluster, store

ON_N1 = Allocation(("n1",), (ResourceVector(cpus=1),))
NOTE = "moved by the traffic graph (harmonic): 8.0 MB/s expected to job 7 (alice/db) ..."


def test_the_note_is_kept_with_the_started_job_and_shown(
    db: str, clock: VirtualClock, cluster: Cluster
) -> None:
    store(cluster, make_job(1).build())
    plan = Plan(revision=0, placements=(Placement(1, ON_N1, note=NOTE),))
    assert asyncio.run(cluster.apply_plan(plan)) == [1]
    asyncio.run(cluster.close())
    again = new_cluster(db, clock)  # what the store holds, after a restart
    started = again.jobs[1]
    assert started.state is JobState.RUNNING and started.extra[PLACEMENT_NOTE] == NOTE
    assert _detail(started, None, [], []) == f"job is RUNNING, not pending; {NOTE}"
    info = job_info(started, again)
    assert info.placement == NOTE
    assert f"Placement={NOTE}" in "\n".join(job_lines(info, clock.now()))
    assert PLACEMENT_NOTE not in requeued(started, clock.now()).extra
    again.store.close()


def test_a_start_without_a_note_keeps_no_older_one(cluster: Cluster) -> None:
    job = make_job(1).build()
    store(cluster, job.evolve(extra={**job.extra, PLACEMENT_NOTE: NOTE}))
    assert asyncio.run(cluster.apply_plan(Plan(revision=0, placements=(Placement(1, ON_N1),)))) == [
        1
    ]
    assert PLACEMENT_NOTE not in cluster.jobs[1].extra
    assert job_info(cluster.jobs[1], cluster).placement is None
