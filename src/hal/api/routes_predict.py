"""``/v1/predict``: the server's run-time predictor."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from hal.api.context import ServerContext, caller_dep, context_dep
from hal.core.errors import Unavailable
from hal.state.cluster import Caller
from hal.wire.predict import PredictStatus

router = APIRouter(prefix="/v1/predict", tags=["predict"])
Ctx = Annotated[ServerContext, Depends(context_dep)]
Who = Annotated[Caller, Depends(caller_dep)]


@router.get("/status", response_model=PredictStatus)
async def predict_status(ctx: Ctx, _caller: Who) -> PredictStatus:
    """Predictor, model version and age, data size and recent accuracy
    (``hal predict status``)."""
    if ctx.predictions is None:
        raise Unavailable("this server runs no prediction service")
    return PredictStatus.model_validate(ctx.predictions.status())
