"""What a full queue costs the server's event loop per request, in CPU seconds (so a
loaded machine's figures compare): the job list behind ``GET /v1/jobs`` and ``squeue``
(the first after a start, then with every running job's usage sample new, then with
nothing changed) and a sync's lost-job check, on a real ``Cluster`` over the memory
store holding R running jobs on N nodes and P pending, no server; and ``squeue``'s
part in the client of its default report: the list of the fields it asks for (less
those at their default where the tree leaves them out), the parse and the layout (the
least of ``REPEAT``). Prints one JSON object::

    python bench/queue_paths.py [N [R [P]]]                      # 1000 5000 15000
    PYTHONPATH=/path/to/other/tree/src python bench/queue_paths.py

On a tree without ``hal.api.job_list`` the list is what its route did: ``job_info`` of
every job, then FastAPI's response validation and dump of the ``JobList``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from hal.core.clock import VirtualClock
from hal.state import agents
from hal.state.agents import AgentSession
from hal.state.cluster import Cluster
from hal.state.memory_store import MemoryStateStore
from hal.testing import JobBuilder, make_job
from hal.testing.builders import make_node
from hal.testing.mirror import new_cluster, store
from hal.wire.agent import JobUsage

REPEAT = 3  # squeue's parse and layout: the least CPU of this many


def _lister(cluster: Cluster, loop: asyncio.AbstractEventLoop) -> Callable[[], bytes]:
    jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
    try:
        from hal.api.job_list import JobListCache
    except ImportError:
        from pydantic import TypeAdapter

        from hal.api.convert import job_info
        from hal.wire.jobs import JobList

        adapter = TypeAdapter(JobList)

        def before() -> bytes:
            model = JobList(jobs=[job_info(j, cluster) for j in jobs])
            return adapter.dump_json(adapter.validate_python(model))

        return before
    cache = JobListCache()
    return lambda: loop.run_until_complete(cache.body(jobs, cluster))


def _samples(cluster: Cluster, nodes: int) -> None:
    """A new usage sample for every running job, as their agents' next syncs bring."""
    now = cluster.clock.now()
    for n in range(nodes):
        used = cluster.usage.get(f"e{n}")
        cluster.agent_sessions[f"e{n}"].usage = {
            j: (now, JobUsage(job_id=j, attempt=0, rss_bytes=1, max_rss_bytes=2, cpu_seconds=now))
            for j in (used.jobs if used else ())
        }


def _squeue(
    cluster: Cluster, clock: VirtualClock, loop: asyncio.AbstractEventLoop, full: bytes
) -> dict[str, object]:
    """``squeue``'s own part of its default report, in the client: the list of the fields
    it asks for (where this tree asks for some: the server's CPU for it, warm, and its
    bytes), the parse, and the filter, array folding, sort and layout."""
    from hal.client import records as read
    from hal.compat import squeue

    query = squeue.parse_query([])
    assert query is not None
    out: dict[str, object] = {}
    body = full
    defaults = None
    if hasattr(squeue, "query_fields"):
        from hal.api.job_list import JobListCache

        jobs = sorted(cluster.jobs.values(), key=lambda j: j.id)
        asked = squeue.query_fields(query) or []
        fields = frozenset(asked)
        # (where this tree leaves out the fields at their default, as squeue asks)
        defaults = read.job_defaults(asked) if hasattr(read, "job_defaults") else None
        extra = (True,) if defaults else ()
        cache = JobListCache()
        loop.run_until_complete(cache.body(jobs, cluster, fields, *extra))
        clock.advance(5)
        t = time.process_time()
        body = loop.run_until_complete(cache.body(jobs, cluster, fields, *extra))
        out["list_squeue_fields_s"] = round(time.process_time() - t, 3)
        out["list_squeue_fields_bytes"] = len(body)
    now = cluster.clock.now()
    parse, layout = [], []
    for _ in range(REPEAT):  # (the least of a few: a loaded machine's noise is added time)
        t = time.process_time()
        listed = (read.records(body, defaults) if defaults else read.records(body)).jobs
        parse.append(time.process_time() - t)
        t = time.process_time()
        if hasattr(squeue, "query_fields"):
            wanted = squeue._wanted(query)
            shown = [job for job in listed if wanted(job)]
        else:
            wanted_before: Any = squeue._wanted  # (the tree before's: of a job and the query)
            shown = [job for job in listed if wanted_before(job, query)]
        shown = squeue.sort_jobs(squeue.fold_arrays(shown), query.sort, now)
        lines = squeue.job_lines(query.layout, shown, now, header=True)
        layout.append(time.process_time() - t)
    out["squeue_parse_s"] = round(min(parse), 3)
    out["squeue_layout_s"] = round(min(layout), 3)
    out["squeue_lines"] = len(lines)
    return out


def queue(
    nodes: int, running: int, pending: int, waiting: Callable[[int], JobBuilder] = make_job
) -> tuple[Cluster, VirtualClock]:
    """A mirror over the memory store with ``nodes`` of 16 CPUs (each with its agent's
    session), jobs 1..``running`` running on them and the next ``pending`` waiting
    (``waiting(id)``'s), and its clock."""
    clock = VirtualClock(1_000_000.0)
    cluster = new_cluster(MemoryStateStore(), clock)
    for n in range(nodes):
        cluster.nodes[f"e{n}"] = make_node(f"e{n}").cpus(16).mem_gib(64).build()
        cluster.agent_sessions[f"e{n}"] = AgentSession(f"e{n}")
    now = clock.now()
    store(
        cluster,
        *[
            make_job(i).running_on(f"e{i % nodes}", start=now - 5).build().evolve(launched=True)
            for i in range(1, running + 1)
        ],
        *[waiting(i).build() for i in range(running + 1, running + pending + 1)],
    )
    return cluster, clock


def main(nodes: int, running: int, pending: int) -> dict[str, object]:
    cluster, clock = queue(nodes, running, pending)
    loop = asyncio.new_event_loop()
    listing = _lister(cluster, loop)
    out: dict[str, object] = {"nodes": nodes, "running": running, "pending": pending}
    for name, fresh in (("list_first_s", True), ("list_samples_s", True), ("list_same_s", False)):
        if fresh:
            _samples(cluster, nodes)
        clock.advance(5)
        t = time.process_time()
        body = listing()
        out[name] = round(time.process_time() - t, 3)
    out["list_bytes"] = len(body)
    out.update(_squeue(cluster, clock, loop, body))
    syncs = min(nodes, 200)
    t = time.process_time()
    for n in range(syncs):
        session = cluster.agent_sessions[f"e{n}"]
        session.lost_check_after = 0.0
        used = cluster.usage.get(f"e{n}")
        supervised = set(used.jobs) if used else set()
        loop.run_until_complete(agents._check_lost(cluster, session, supervised, clock.now()))
    out["lost_check_ms_per_sync"] = round(1000 * (time.process_time() - t) / syncs, 3)
    loop.close()
    return out


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:4]]
    print(json.dumps(main(*(args + [1000, 5000, 15000][len(args) :]))))
