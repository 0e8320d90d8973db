"""Keeps the queue's kept job-list JSON up to date between requests.

The first ``squeue`` after a server's start, or after a burst of submissions, built every
new job's JSON inside the request: at 100,000 queued jobs 1.5 s of the event loop, and
more while a pass was decided, since the build then gives way to it (ADR 0030). Every
``WARM_EVERY_S`` this task builds, outside any request, what the kept field sets lack of
the queue (``JobListCache.warm``: squeue's default set from the start, the others while
lists ask for them), whenever no pass is being decided. A list then serialises only the
live fields that changed and the jobs changed since the last round.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI

from hal.api.job_list import job_list_warm
from hal.core.states import JobState
from hal.server.services import Services

log = logging.getLogger(__name__)

# the states ``GET /v1/jobs`` lists when none is asked for (``squeue``'s default)
QUEUE_STATES = frozenset(
    {JobState.PENDING, JobState.RUNNING, JobState.COMPLETING, JobState.SUSPENDED}
)
WARM_EVERY_S = 5.0  # a round: a scan of the queue (about 10 ms at 100,000 jobs), if idle


async def keep_warm(ctx: Services) -> None:
    """A round every ``WARM_EVERY_S`` on the leader (a standby's mirror is not loaded),
    waiting while a pass is being decided; until cancelled."""
    idle = ctx.service.undecided.wait
    failing = False
    while True:
        await asyncio.sleep(WARM_EVERY_S)
        if ctx.leadership is not None and ctx.leadership.role != "leader":
            continue
        cluster = ctx.cluster
        queue = [j for j in cluster.jobs.values() if j.state in QUEUE_STATES]
        try:
            await job_list_warm(queue, cluster, idle)
            failing = False
        except Exception:  # (a job no list can show fails its own request, not this task)
            if not failing:
                log.exception("keeping the job lists' JSON up to date failed; trying on")
            failing = True


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """``keep_warm`` while the app serves."""
    task = asyncio.create_task(keep_warm(app.state.ctx), name="hal-job-lists")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
