"""``GET /v1/jobs``'s body from kept JSON (``hal.api.job_list``): the same JSON as a
``JobList`` of ``job_info`` built afresh, request after request, while jobs change,
the clock moves, usage samples come and dependencies end."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hal.api.convert import job_info
from hal.api.job_list import JobListCache
from hal.core.clock import VirtualClock
from hal.core.states import JobState, PendingReason
from hal.state.agents import AgentSession
from hal.state.cluster import Cluster
from hal.state.memory_store import MemoryStateStore
from hal.state.suspension import suspension
from hal.testing import make_job
from hal.testing.mirror import new_cluster, store
from hal.wire.agent import JobUsage
from hal.wire.jobs import JobList


def fresh(cluster: Cluster) -> Any:
    jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
    return json.loads(JobList(jobs=[job_info(j, cluster) for j in jobs]).model_dump_json())


def kept(cache: JobListCache, cluster: Cluster) -> Any:
    jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
    return json.loads(asyncio.run(cache.body(jobs, cluster)))


def test_the_kept_list_follows_jobs_clock_samples_and_dependencies() -> None:
    clock = VirtualClock(1_000_000.0)
    cluster = new_cluster(MemoryStateStore(), clock)
    now = clock.now()
    store(
        cluster,
        make_job(1).build(),  # plain pending: settled
        make_job(2).running_on("n1", start=now - 10).build(),
        make_job(3).depends("afterok:2").reason(PendingReason.DEPENDENCY).build(),
        make_job(4).begin(now + 30).build(),  # its eligible time is its begin, until then
        make_job(5).running_on("n1", start=now - 5, state=JobState.SUSPENDED).build(),
    )
    cluster.put(cluster.jobs[5].evolve(extra=suspension({}, now - 2)))
    cache = JobListCache()
    assert kept(cache, cluster) == fresh(cluster)
    assert cache.built == 5
    clock.advance(60)  # past job 4's begin; job 5's suspension grows
    shown = kept(cache, cluster)
    assert shown == fresh(cluster)
    assert shown["jobs"][4]["suspended_seconds"] == 62.0
    # a usage sample for job 2 from its agent: only its live fields are written again
    session: AgentSession = cluster.agent_sessions["n1"]
    sample = JobUsage(job_id=2, attempt=0, rss_bytes=5, max_rss_bytes=7, cpu_seconds=3.5)
    session.usage = {2: (clock.now(), sample)}
    built = cache.built
    shown = kept(cache, cluster)
    assert shown == fresh(cluster)
    assert shown["jobs"][1]["max_rss_bytes"] == 7
    assert cache.built == built + 1
    # job 2 ends: itself and its dependent's dependency state change
    cluster.put(cluster.jobs[2].evolve(state=JobState.COMPLETED, end_time=clock.now()))
    cluster.put(cluster.jobs[1].evolve(priority=77))
    shown = kept(cache, cluster)
    assert shown == fresh(cluster)
    assert shown["jobs"][0]["priority"] == 77
    assert shown["jobs"][1]["state"] == "COMPLETED"
    # nothing changed: every job's JSON is the one kept, none serialised again
    built = cache.built
    assert kept(cache, cluster) == fresh(cluster)
    assert cache.built == built
