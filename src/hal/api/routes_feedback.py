"""``/v1/jobs/{id}/feedback``: what a job reports about itself (``hal.server.feedback``;
docs/feedback.md).

``POST`` is the job's own: authorised by its ``HAL_FEEDBACK_TOKEN`` (not a user's
token), good for its current run only. A token of another job or run is a 401, a
malformed report a 400, a job not running a 409, a flood a 429; none stores anything.
``GET`` is any user's, as squeue shows every job, with a user token; an ended job's
series are kept for sacct.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query

from hal.api.deps import caller_dep, services_dep
from hal.core.errors import InvalidRequest, NotConfigured, NotFound
from hal.core.feedback import FeedbackSeries
from hal.core.job import Job
from hal.server.feedback import FeedbackService
from hal.server.services import Services
from hal.state.cluster import Caller
from hal.wire.bounds import INT64_MAX
from hal.wire.feedback import FeedbackList, FeedbackMetric, FeedbackReport, JobFeedback

router = APIRouter(prefix="/v1/jobs", tags=["feedback"])
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]
JobId = Annotated[int, Path(ge=1, le=2**62)]


@router.post("/{job_id}/feedback", response_model=JobFeedback)
async def report(
    ctx: Ctx,
    job_id: JobId,
    body: FeedbackReport,
    authorization: Annotated[str | None, Header()] = None,
) -> JobFeedback:
    """Keep one report of a running job's (its ``HAL_FEEDBACK_TOKEN`` as the bearer)."""
    feedback = _service(ctx)
    job = ctx.cluster.jobs.get(job_id)
    if job is None:
        raise NotFound(f"job {job_id} is not in the queue: only a running job reports", field="job")
    series = await feedback.report(job, authorization, body.metrics)
    return job_feedback(job, series, points=False)


@router.get("/{job_id}/feedback", response_model=JobFeedback)
async def read(
    ctx: Ctx,
    _caller: Who,
    job_id: JobId,
    points: Annotated[bool, Query()] = True,
) -> JobFeedback:
    """A job's metrics: latest value, goal, count and (``points``) the kept series."""
    feedback = _service(ctx)
    job = ctx.cluster.jobs.get(job_id)
    if job is None:
        stored = await ctx.cluster.db(ctx.cluster.store.jobs_by_id, [job_id])
        if not stored:
            raise NotFound(
                f"job {job_id} is unknown (hal squeue lists the queue, hal sacct the ended)",
                field="job",
            )
        job = stored[0]
    return job_feedback(job, await feedback.series([job.id]), points=points)


many = APIRouter(prefix="/v1/feedback", tags=["feedback"])


@many.get("", response_model=FeedbackList)
async def latest(
    ctx: Ctx,
    _caller: Who,
    jobs: Annotated[str, Query(max_length=20_000, pattern=r"^[0-9]+(,[0-9]+)*$")],
) -> FeedbackList:
    """Several jobs' latest values (``jobs=1,2,3``, at most 1,000), for sacct's Feedback
    column; jobs that reported nothing (or are unknown) are left out."""
    ids = sorted({_job_number(j) for j in jobs.split(",")})
    if len(ids) > 1000:
        raise InvalidRequest(f"{len(ids)} jobs; at most 1000 a request", field="jobs")
    by_job: dict[int, list[FeedbackSeries]] = {}
    for s in await _service(ctx).series(ids):
        by_job.setdefault(s.job_id, []).append(s)
    if not by_job:
        return FeedbackList()
    known = {j.id: j for j in await ctx.cluster.db(ctx.cluster.store.jobs_by_id, list(by_job))}
    known.update((i, ctx.cluster.jobs[i]) for i in by_job if i in ctx.cluster.jobs)
    return FeedbackList(
        jobs=[job_feedback(known[i], by_job[i], points=False) for i in sorted(by_job) if i in known]
    )


def _job_number(text: str) -> int:
    """One id of ``jobs=``: a number a job id can be (below 2^63, the database's). A
    longer one was a 500 (Python refuses ``int()`` of over 4,300 digits; PostgreSQL a
    number past BIGINT)."""
    if len(text) > len(str(INT64_MAX)) or int(text) > INT64_MAX:
        shown = text if len(text) <= 24 else f"{text[:20]}..."
        raise InvalidRequest(
            f"job id {shown} is out of range: job ids are below 2^63 (at most 19 digits)",
            field="jobs",
        )
    return int(text)


def job_feedback(job: Job, series: list[FeedbackSeries], *, points: bool) -> JobFeedback:
    goals = dict(job.spec.feedback_goals)
    return JobFeedback(
        id=job.id,
        job_id=job.display_id,
        metrics=[
            FeedbackMetric(
                name=s.metric,
                goal=goals.get(s.metric),
                count=s.count,
                latest=s.last_value,
                latest_time=s.last_time,
                points=list(s.points) if points else [],
            )
            for s in sorted(series, key=lambda s: s.metric)
        ],
    )


def _service(ctx: Services) -> FeedbackService:
    if ctx.feedback is None:
        raise NotConfigured("this server takes no application feedback")
    return ctx.feedback
