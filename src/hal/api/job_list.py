"""The body of ``GET /v1/jobs`` (``squeue``, the dashboard) from each job's JSON kept
between requests.

Building a ``JobInfo`` and serialising it costs a few hundred microseconds a job: at
20,000 queued jobs that is seconds of the control plane's one event loop per ``squeue``,
taken from the agents' syncs and the scheduler. A job is immutable (a change is a new
``Job``), so the JSON of the fields only the job decides (``convert.job_fields``) is kept
while the mirror holds the same object; the few that depend on the clock, the agent's
latest usage sample or other jobs (``convert.LIVE_FIELDS``) are worked out on every
request (unless ``convert.live_settled`` says they cannot have changed: a plain pending
job's) and serialised again only when they changed. The body is the same JSON as
``JobList``'s (its fields in another order).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter, create_model

from hal.api.convert import LIVE_FIELDS, job_fields, live_fields, live_settled
from hal.core.job import Job
from hal.state.cluster import Cluster
from hal.wire.jobs import JobInfo

# the live fields alone, typed and serialised as JobInfo's
_Live: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "JobInfoLive",
    **{name: (f.annotation, f) for name, f in JobInfo.model_fields.items() if name in LIVE_FIELDS},
)
_INFO: TypeAdapter[JobInfo] = TypeAdapter(JobInfo)
_LIVE: TypeAdapter[Any] = TypeAdapter(_Live)
# a few milliseconds of serialising between two turns of the event loop
YIELD_EVERY = 50
_OWN, _SHARED = set(JobInfo.model_fields) - LIVE_FIELDS, set(LIVE_FIELDS)


@dataclass(slots=True)
class _Entry:
    job: Job  # the version whose JSON ``head`` is (identity, not equality)
    head: bytes  # ``{`` and the job's own fields, without the closing brace
    live: dict[str, Any]  # the live fields ``tail`` holds
    tail: bytes  # ``,`` and the live fields, with the closing brace
    whole: bytes  # head + tail


class JobListCache:
    """Each listed job's JSON, by job id; entries of jobs the mirror no longer holds are
    dropped when they outnumber the mirror's jobs."""

    def __init__(self) -> None:
        self.entries: dict[int, _Entry] = {}
        self.built = 0  # JSON serialised afresh, a job's or its live fields'

    async def body(self, jobs: Sequence[Job], cluster: Cluster) -> bytes:
        """``{"jobs": [...]}`` of ``jobs``, in their order. Between every ``YIELD_EVERY``
        jobs serialised afresh it lets the event loop run (the first list after a start
        builds every job's JSON: seconds at 20,000 jobs); the jobs are the versions
        ``jobs`` holds, whatever changes meanwhile."""
        now = cluster.clock.now()
        parts: list[bytes] = []
        built = self.built
        for job in jobs:
            parts.append(self._json(job, cluster, now))
            if self.built - built >= YIELD_EVERY:
                built = self.built
                await asyncio.sleep(0)
        if len(self.entries) > 2 * len(cluster.jobs) + 1000:
            held = cluster.jobs
            self.entries = {k: e for k, e in self.entries.items() if held.get(k) is e.job}
        return b'{"jobs":[' + b",".join(parts) + b"]}"

    def _json(self, job: Job, cluster: Cluster, now: float) -> bytes:
        entry = self.entries.get(job.id)
        if entry is not None and entry.job is job and live_settled(job):
            return entry.whole  # (most of a queue: no field to work out)
        live = live_fields(job, cluster, now)
        if entry is None or entry.job is not job:
            info = JobInfo(**job_fields(job), **live)  # validated once per version
            head = _INFO.dump_json(info, include=_OWN)[:-1]
            tail = b"," + _INFO.dump_json(info, include=_SHARED)[1:]
            entry = self.entries[job.id] = _Entry(job, head, live, tail, head + tail)
            self.built += 1
        elif entry.live != live:
            entry.live = live
            entry.tail = b"," + _LIVE.dump_json(_LIVE.validate_python(live))[1:]
            entry.whole = entry.head + entry.tail
            self.built += 1
        return entry.whole


_CACHES: weakref.WeakKeyDictionary[Cluster, JobListCache] = weakref.WeakKeyDictionary()


async def job_list_body(jobs: Sequence[Job], cluster: Cluster) -> bytes:
    """``JobListCache.body`` with the cache kept for ``cluster``."""
    cache = _CACHES.get(cluster)
    if cache is None:
        cache = _CACHES[cluster] = JobListCache()
    return await cache.body(jobs, cluster)
