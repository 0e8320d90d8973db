"""``/v1/predict``: the server's run-time predictor."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query

from hal.api.convert import job_info
from hal.api.deps import caller_dep, services_dep
from hal.core.errors import InvalidRequest, NotConfigured
from hal.server.services import Services
from hal.state.cluster import Caller
from hal.wire.jobs import JobList
from hal.wire.predict import FinishedPredictionInfo, FinishedPredictionList, PredictStatus

router = APIRouter(prefix="/v1/predict", tags=["predict"])
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]


@router.get("/status", response_model=PredictStatus)
async def predict_status(ctx: Ctx, _caller: Who) -> PredictStatus:
    """Predictor, model version and age, data size and recent accuracy
    (``hal predict status``)."""
    if ctx.predictions is None:
        raise NotConfigured("this server runs no prediction service")
    return PredictStatus.model_validate(ctx.predictions.status())


@router.get("/finished", response_model=FinishedPredictionList)
async def predict_finished(
    ctx: Ctx, _caller: Who, limit: Annotated[int, Query(ge=1, le=500)] = 200
) -> FinishedPredictionList:
    """The last finished runs (at most 500 are kept), newest first, each with the run
    time predicted when it started and the run time it had: the dashboard's scatter."""
    if ctx.predictions is None:
        raise NotConfigured("this server runs no prediction service")
    rows = [
        FinishedPredictionInfo(
            job_id=f.job_id,
            user=f.user,
            partition=f.partition,
            predicted_seconds=f.predicted_s,
            actual_seconds=f.actual_s,
            time_limit_seconds=f.time_limit_s,
            end_time=f.end_time,
        )
        for f in ctx.predictions.recent_finished(limit)
    ]
    return FinishedPredictionList(predictor=ctx.predictions.name, jobs=rows)


@router.get("/history", response_model=JobList)
async def predict_history(
    ctx: Ctx,
    _caller: Who,
    limit: Annotated[int, Query(ge=1, le=5000)] = 1000,
    before_end: Annotated[float | None, Query(allow_inf_nan=False)] = None,
    before_id: int | None = None,
) -> JobList:
    """The jobs that ran and ended, the latest end first, a page at a time: the next
    page is the one before (``before_end``, ``before_id``), the last job of this one.
    What the predictor replays at start-up and ``hal predict eval`` reads (``GET
    /v1/jobs?history=true`` answers in one piece: a million jobs took gigabytes)."""
    if (before_end is None) != (before_id is None):
        raise InvalidRequest("give both before_end and before_id (the last job of a page)")
    before = None if before_end is None or before_id is None else (before_end, before_id)
    store = ctx.cluster.store
    jobs = await ctx.cluster.db(store.finished_runs, limit, before)
    return JobList(jobs=[job_info(j, ctx.cluster) for j in jobs])
