"""``/v1/cloud``: the node groups and the nodes the autoscaler made (``hal cloud``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request

from hal.api.deps import caller_dep, services_dep
from hal.server.services import Services
from hal.state.cluster import Caller
from hal.wire.bounds import LATEST_SECONDS
from hal.wire.cloud import CloudCosts, CloudPrices, CloudStatus

router = APIRouter(prefix="/v1/cloud", tags=["cloud"])
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]


@router.get("", response_model=CloudStatus)
async def cloud_status(request: Request, _ctx: Ctx, _caller: Who) -> CloudStatus:
    """Each group with its nodes: booting, joined, idle (since when) or stopping; and
    what it made, removed and failed to start since the server started. No groups
    where hal.toml has no ``[cloud]``."""
    service = _ctx.cloud
    return CloudStatus() if service is None else service.status()


@router.get("/prices", response_model=CloudPrices)
async def cloud_prices(_ctx: Ctx, _caller: Who) -> CloudPrices:
    """Each group's price an hour as the autoscaler uses it: its source (``config``, or
    the provider's price list), its age, and the last reading's error."""
    service = _ctx.cloud
    return CloudPrices() if service is None else service.price_list()


@router.get("/costs", response_model=CloudCosts)
async def cloud_costs(
    _ctx: Ctx,
    _caller: Who,
    since: Annotated[float | None, Query(ge=0, le=LATEST_SECONDS)] = None,
) -> CloudCosts:
    """What cloud capacity cost per account and user since ``since`` (Unix time;
    default: the start of this month, UTC), with each ``cloud_budget``."""
    service = _ctx.cloud
    if service is None:
        now = _ctx.cluster.clock.now()
        return CloudCosts(since=now if since is None else since, until=now)
    return await service.costs(since)
