"""``/v1/cloud``: the node groups and the nodes the autoscaler made (``hal cloud``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from hal.api.deps import caller_dep, services_dep
from hal.server.services import Services
from hal.state.cluster import Caller
from hal.wire.cloud import CloudStatus

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
