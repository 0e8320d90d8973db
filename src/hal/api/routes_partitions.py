"""``PATCH /v1/partitions/{name}``: an administrator changes a partition while the
server runs (``scontrol update PartitionName=``; ``hal.state.partitions``). The list is
``GET /v1/partitions`` (``routes_nodes``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from hal.api.cloud_nodes import cloud_nodes, cloud_of
from hal.api.convert import partition_info
from hal.api.deps import admin_dep, services_dep
from hal.core.states import PartitionState
from hal.server.services import Services
from hal.state.cluster import Caller
from hal.state.partitions import PartitionUpdate, update_partition
from hal.wire.nodes import PartitionChange, PartitionInfo

router = APIRouter(prefix="/v1", tags=["cluster"])
Ctx = Annotated[Services, Depends(services_dep)]
Admin = Annotated[Caller, Depends(admin_dep)]


@router.patch("/partitions/{name}", response_model=PartitionInfo)
async def change_partition(
    name: str, body: PartitionChange, request: Request, ctx: Ctx, admin: Admin
) -> PartitionInfo:
    """Set the fields ``body`` gives: 404 for an unknown partition, 400 for a
    DefaultTime above MaxTime or no field at all, 409 for ``default: false`` on the only
    default partition; a non-administrator gets 403."""
    update = PartitionUpdate(
        state=None if body.state is None else PartitionState(body.state),
        max_time_s=body.max_time_seconds,
        default_time_s=body.default_time_seconds,
        max_nodes=body.max_nodes,
        priority_job_factor=body.priority_job_factor,
        priority_tier=body.priority_tier,
        default=body.default,
    )
    partition = await update_partition(ctx.cluster, name, update, admin.name)
    cloud = cloud_nodes(cloud_of(request))
    return partition_info(partition, ctx.cluster, ctx.config.preemption, cloud)
