"""salloc's allocation shows ``Requeue=1`` as Slurm 22.05.8 shows it (the cluster's
default), yet a node failure ends it NODE_FAIL rather than putting it back in
the queue: Slurm requeues only a batch job (``batch_flag``), and the allocation's command
ran on the submit host and has gone. A batch job is requeued. On a real ``Cluster`` over
SQLite, no agents."""

from __future__ import annotations

import asyncio

from hal.api.convert import job_info
from hal.compat.scontrol import job_record
from hal.core.clock import VirtualClock
from hal.core.job import Job
from hal.core.states import JobState
from hal.state.cluster import Cluster
from hal.testing import make_job
from hal.testing.mirror import commit, store


def node_failed(cluster: Cluster, clock: VirtualClock, job_id: int) -> JobState:
    clock.advance(5)
    done, event = cluster.finish(cluster.jobs[job_id], JobState.NODE_FAIL, clock.now())
    asyncio.run(commit(cluster, [done], [event]))
    return cluster.jobs[job_id].state


def running(job_id: int, clock: VirtualClock, *, interactive: bool) -> Job:
    job = make_job(job_id).cpus(1).running_on("n1", start=clock.now() - 60).build()
    return job.evolve(launched=True, spec=job.spec.with_changes(interactive=interactive))


def test_an_allocation_shows_requeue_1_but_a_node_failure_ends_it(
    cluster: Cluster, clock: VirtualClock
) -> None:
    store(cluster, running(1, clock, interactive=True), running(2, clock, interactive=False))
    shown = job_record(job_info(cluster.jobs[1], cluster), clock.now())
    assert "Requeue=1 Restarts=0 BatchFlag=0 Reboot=0 ExitCode=0:0" in shown
    assert node_failed(cluster, clock, 1) is JobState.NODE_FAIL
    assert node_failed(cluster, clock, 2) is JobState.PENDING  # a batch job: requeued
