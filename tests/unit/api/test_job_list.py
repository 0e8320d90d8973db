"""``GET /v1/jobs``'s body from kept JSON (``hal.api.job_list``): the same JSON as a
``JobList`` of ``job_info`` built afresh, request after request, while jobs change,
the clock moves, usage samples come and dependencies end."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from typing import Any

import pytest

from hal.api.convert import LIVE_FIELDS, job_info, live_settled
from hal.api.job_list import (
    GIVE_WAY_S,
    JOB_DEFAULTS,
    JOB_FIELDS,
    MAX_FIELD_SETS,
    SQUEUE_FIELDS,
    WARM_FOR_S,
    YIELD_EVERY,
    JobListCache,
    field_set,
    history_body,
)
from hal.core.clock import VirtualClock
from hal.core.errors import InvalidRequest
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


def kept(
    cache: JobListCache,
    cluster: Cluster,
    fields: frozenset[str] | None = None,
    omit_defaults: bool = False,
) -> Any:
    jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
    return json.loads(asyncio.run(cache.body(jobs, cluster, fields, omit_defaults)))


def filled(listed: Any, fields: frozenset[str]) -> Any:
    """A list with ``omit_defaults`` as a reader takes it: each field left out at its
    default, checking that none sent is at its default."""
    out = []
    for job in listed["jobs"]:
        at_default = {k for k, v in job.items() if k in JOB_DEFAULTS and JOB_DEFAULTS[k] == v}
        assert not at_default, (job, at_default)
        out.append({k: job[k] if k in job else JOB_DEFAULTS[k] for k in fields})
    return {"jobs": out}


def only(listed: Any, fields: frozenset[str]) -> Any:
    return {"jobs": [{k: v for k, v in job.items() if k in fields} for job in listed["jobs"]]}


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


# squeue's default format's fields; one with live fields of every kind; the profile's two
# that are the job's own; one live field alone; the defaults no conversion sets
FIELD_SETS = [
    frozenset(
        [
            "id",
            "display_id",
            "array_job_id",
            "array_task_id",
            "array_max_running",
            "partition",
            "name",
            "user",
            "state",
            "state_code",
            "start_time",
            "end_time",
            "suspended_seconds",
            "node_count",
            "nodes",
            "reason",
            "priority",
        ]
    ),
    frozenset(
        ["id", "expected_start", "eligible_time", "max_rss_bytes", "cost", "dependency_state"]
    ),
    frozenset({"malleable", "feedback_action", "profile", "name"}),
    frozenset({"suspended_seconds"}),
    frozenset({"steps", "runs", "predicted_end", "id"}),
]


def four_jobs() -> tuple[VirtualClock, Cluster]:
    """Pending, running, pending on a dependency and suspended: jobs 1, 2, 3 and 5."""
    clock = VirtualClock(1_000_000.0)
    cluster = new_cluster(MemoryStateStore(), clock)
    now = clock.now()
    store(
        cluster,
        make_job(1).build(),
        make_job(2).running_on("n1", start=now - 10).build(),
        make_job(3).depends("afterok:2").reason(PendingReason.DEPENDENCY).build(),
        make_job(5).running_on("n1", start=now - 5, state=JobState.SUSPENDED).build(),
    )
    cluster.put(cluster.jobs[5].evolve(extra=suspension({}, now - 2)))
    return clock, cluster


def test_each_field_set_lists_those_fields_of_the_full_form_as_jobs_change() -> None:
    """``fields=``: every job with exactly the fields asked for, their values the full
    form's, while the clock moves, a usage sample comes and jobs change; a field set
    asked for again serialises only what changed."""
    clock, cluster = four_jobs()
    cache = JobListCache()
    for fields in FIELD_SETS:
        shown = kept(cache, cluster, fields)
        assert shown == only(fresh(cluster), fields)
        assert all(job.keys() == fields for job in shown["jobs"])
    clock.advance(30)
    session: AgentSession = cluster.agent_sessions["n1"]
    sample = JobUsage(job_id=2, attempt=0, rss_bytes=5, max_rss_bytes=9, cpu_seconds=3.5)
    session.usage = {2: (clock.now(), sample)}
    cluster.put(cluster.jobs[1].evolve(priority=78))
    for fields in FIELD_SETS:
        assert kept(cache, cluster, fields) == only(fresh(cluster), fields)
    assert kept(cache, cluster, FIELD_SETS[1])["jobs"][1]["max_rss_bytes"] == 9
    assert kept(cache, cluster, FIELD_SETS[0])["jobs"][3]["suspended_seconds"] == 32.0
    built = cache.built
    assert kept(cache, cluster, FIELD_SETS[2]) == only(fresh(cluster), FIELD_SETS[2])
    assert cache.built == built  # (no live field of these follows the clock here)
    clock.advance(5)
    assert kept(cache, cluster, FIELD_SETS[3]) == only(fresh(cluster), FIELD_SETS[3])
    assert cache.built == built + 1  # (job 5's: suspended, its figure grows)
    # (squeue's one live field: a running job's is its version's, a suspended one's not)
    assert live_settled(cluster.jobs[2], FIELD_SETS[3]) and not live_settled(cluster.jobs[2])
    assert not live_settled(cluster.jobs[5], FIELD_SETS[3])
    assert kept(cache, cluster) == fresh(cluster)  # the full form alongside


def test_omit_defaults_leaves_out_just_the_fields_at_their_default() -> None:
    """``omit_defaults``: each job less the fields at their default, the others the
    full form's, for every field set and every field, while jobs change and the clock
    moves; the queue's list and history's (built afresh) alike; kept apart from the
    same field set's full JSON."""
    clock, cluster = four_jobs()
    cache = JobListCache()
    every = frozenset(JOB_FIELDS)
    for step in range(2):
        for fields in [*FIELD_SETS, every]:
            compact = kept(cache, cluster, fields, omit_defaults=True)
            assert filled(compact, fields) == only(fresh(cluster), fields), (step, fields)
            assert kept(cache, cluster, fields) == only(fresh(cluster), fields)
            jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
            history = json.loads(asyncio.run(history_body(jobs, cluster, fields, True, {}, {})))
            assert filled(history, fields) == only(fresh(cluster), fields)
        first = kept(cache, cluster, FIELD_SETS[0], omit_defaults=True)["jobs"][0]
        assert ("start_time" in first) is (step == 1)  # pending, then started
        assert ("nodes" in first) is (step == 1)
        clock.advance(30)
        cluster.put(make_job(1).running_on("n1", start=clock.now()).build())  # (a start)


def test_a_new_field_set_cut_from_kept_ones_is_the_json_built_from_scratch() -> None:
    """A field set asked for after others takes the fields they hold from their JSON
    and builds the rest (nested ones alone): byte for byte the JSON a cache that never
    saw another set builds, with and without ``omit_defaults``, names that look like
    JSON keys, fields at their default, nested and live fields, and after a job
    changes."""
    clock, cluster = four_jobs()
    tricky = 'a,"state":"RUNNING","priority":7'
    store(cluster, make_job(7).name(tricky).comment(',"nice":3}').build())
    first = frozenset(["id", "name", "state", "priority", "start_time", "nodes", "nice", "cost"])
    second = first - {"priority"} | {"comment", "steps", "runs", "gpu_usage", "end_time"}
    third = frozenset(["name", "comment", "nice", "submit_time", "runs", "cpu_seconds"])
    jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
    for omit in (False, True):
        cache = JobListCache()
        for step in range(2):
            for fields in (first, second, third):
                cut = asyncio.run(cache.body(jobs, cluster, fields, omit))
                whole = asyncio.run(JobListCache().body(jobs, cluster, fields, omit))
                assert cut == whole, (omit, step, fields)
            assert json.loads(cut)["jobs"][-1]["name"] == tricky
            cluster.put(cluster.jobs[2].evolve(priority=cluster.jobs[2].priority + 1))
            clock.advance(30)
            jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
        # the fields no earlier set of only flat fields held, built apart: the flat ones
        # together, each nested one alone
        assert {names for names, _ in cache.parts} == {
            frozenset({"comment", "end_time"}),
            frozenset({"steps"}),
            frozenset({"runs"}),
            frozenset({"comment", "submit_time", "cpu_seconds"}) - LIVE_FIELDS,
        }


def test_field_sets_drawn_at_random_cut_from_each_other_are_built_from_scratch() -> None:
    """Sets of any fields, asked for one after another (each cut from those kept before
    it where it can be), each byte for byte the JSON built from scratch."""
    _clock, cluster = four_jobs()
    store(cluster, make_job(7).name('b","id":9').comment('",\\"x":').build())
    jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
    draw = random.Random(56)
    for omit in (False, True):
        cache = JobListCache()
        for _ in range(3 * MAX_FIELD_SETS):
            fields = frozenset(draw.sample(JOB_FIELDS, draw.randint(1, len(JOB_FIELDS) // 2)))
            cut = asyncio.run(cache.body(jobs, cluster, fields, omit))
            assert cut == asyncio.run(JobListCache().body(jobs, cluster, fields, omit))
        assert cache.parts  # (some fields were built beyond those kept)


def test_the_cache_keeps_the_field_sets_asked_for_last() -> None:
    clock = VirtualClock(1_000_000.0)
    cluster = new_cluster(MemoryStateStore(), clock)
    store(cluster, make_job(1).build())
    cache = JobListCache()
    for name in JOB_FIELDS[: MAX_FIELD_SETS + 3]:
        kept(cache, cluster, frozenset({name}))
    assert len(cache.shapes) == MAX_FIELD_SETS
    assert (frozenset({JOB_FIELDS[MAX_FIELD_SETS + 2]}), False) in cache.shapes
    assert (frozenset({JOB_FIELDS[0]}), False) not in cache.shapes


def test_fields_names_jobinfo_fields_and_refuses_others_naming_those_there_are() -> None:
    assert field_set(None) is None
    assert field_set(" , ") is None  # none named: every field
    assert field_set("id, state,id") == frozenset({"id", "state"})
    with pytest.raises(InvalidRequest) as refused:
        field_set("id,colour,shape")
    message = refused.value.message
    assert "unknown job fields: colour, shape" in message
    assert "display_id" in message and "suspended_seconds" in message
    assert refused.value.field == "fields"


def test_a_long_build_sleeps_between_its_turns_while_a_pass_decides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every ``YIELD_EVERY`` jobs built, the queue's list and history's let the loop run:
    at once (``sleep(0)``), or ``GIVE_WAY_S`` asleep while ``give_way()`` says a pass is
    deciding; a list taken from kept JSON builds nothing and never waits."""
    clock = VirtualClock(1_000_000.0)
    cluster = new_cluster(MemoryStateStore(), clock)
    store(cluster, *(make_job(i).build() for i in range(1, 2 * YIELD_EVERY + 1)))
    jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
    slept: list[float] = []
    real_sleep = asyncio.sleep
    here = threading.get_ident()

    async def sleep(seconds: float) -> None:
        if threading.get_ident() != here:  # a loop another test left running: not ours
            await real_sleep(seconds)
            return
        slept.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    deciding = [False]
    cache = JobListCache()
    for passing, fields in ((False, FIELD_SETS[0]), (True, FIELD_SETS[1])):
        deciding[0] = passing
        slept.clear()
        body = asyncio.run(cache.body(jobs, cluster, fields, False, lambda: deciding[0]))
        assert len(json.loads(body)["jobs"]) == len(jobs)
        assert slept == [GIVE_WAY_S if passing else 0] * 2, (passing, slept)
        slept.clear()
        listed = history_body(jobs, cluster, fields, False, {}, {}, lambda: deciding[0])
        history = asyncio.run(listed)
        assert json.loads(history) == json.loads(body)
        assert slept == [GIVE_WAY_S if passing else 0] * 2, (passing, slept)
    slept.clear()
    asyncio.run(cache.body(jobs, cluster, FIELD_SETS[1], False, lambda: True))  # (all kept)
    assert slept == []


def test_warm_builds_ahead_what_the_next_list_would_build() -> None:
    """``warm`` builds squeue's default set (and each set asked for lately) for the jobs
    it lacks, so the next list builds nothing but what changed since; it builds no set
    asked for longer ago than ``WARM_FOR_S``, and waits for ``idle`` between chunks."""
    clock = VirtualClock(1_000_000.0)
    cluster = new_cluster(MemoryStateStore(), clock)
    jobs = [
        (make_job(i).running_on("n1", start=999_000.0) if i % 3 else make_job(i)).build()
        for i in range(1, 2 * YIELD_EVERY + 4)
    ]
    store(cluster, *jobs)
    queue = sorted(cluster.jobs.values(), key=lambda j: j.id)
    cache = JobListCache()
    warmed = asyncio.run(cache.warm(queue, cluster, _idle))
    assert warmed == len(queue) and cache.built == warmed
    body = asyncio.run(cache.body(queue, cluster, SQUEUE_FIELDS, True))
    assert cache.built == warmed  # (every job's JSON kept: nothing built for the list)
    assert body == asyncio.run(JobListCache().body(queue, cluster, SQUEUE_FIELDS, True))
    assert asyncio.run(cache.warm(queue, cluster, _idle)) == 0
    names = frozenset({"id", "name"})
    kept(cache, cluster, names)  # (asked for now: warmed from here on)
    changed = queue[4].evolve(priority=queue[4].priority + 1)
    cluster.put(changed)
    queue[4] = changed
    assert asyncio.run(cache.warm(queue, cluster, _idle)) == 2  # (one job, two sets)
    cache.shapes[(names, False)].asked -= WARM_FOR_S + 1
    changed = queue[5].evolve(priority=queue[5].priority + 1)
    cluster.put(changed)
    queue[5] = changed
    assert asyncio.run(cache.warm(queue, cluster, _idle)) == 1  # (squeue's alone)

    async def waiting() -> tuple[int, int]:
        idle = asyncio.Event()  # (clear: a pass being decided)
        fresh = JobListCache()
        task = asyncio.create_task(fresh.warm(queue, cluster, idle.wait))
        for _ in range(10):
            await asyncio.sleep(0)
        first = fresh.built
        idle.set()
        await task
        return first, fresh.built

    assert asyncio.run(waiting()) == (YIELD_EVERY, len(queue))


def test_warm_drops_the_json_of_jobs_the_mirror_no_longer_holds() -> None:
    """Kept without a request, entries of jobs gone are dropped once they outnumber the
    mirror's jobs (as a list drops them)."""
    clock = VirtualClock(1_000_000.0)
    cluster = new_cluster(MemoryStateStore(), clock)
    store(cluster, *(make_job(i).build() for i in range(1, 1011)))
    cache = JobListCache()
    asyncio.run(cache.warm(list(cluster.jobs.values()), cluster, _idle))
    shape = cache.shapes[(SQUEUE_FIELDS, True)]
    assert len(shape.entries) == 1010
    later = new_cluster(MemoryStateStore(), clock)  # (a mirror of two jobs: 1 and 2)
    store(later, make_job(1).build(), make_job(2).build())
    assert asyncio.run(cache.warm(list(later.jobs.values()), later, _idle)) == 2
    assert sorted(shape.entries) == [1, 2]
    assert all(e.job is later.jobs[k] for k, e in shape.entries.items())


async def _idle() -> None:
    return None
