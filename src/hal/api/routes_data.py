"""``/v1/data``: where a job input is and what reading it costs on each node, staging
into a node's leaf cache, and the data service's status (``hal data ...``).

Answered by ``hal.api.data.DataService``; 503 ``unavailable`` on a server without a
``[data]`` table.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from hal.api.context import ServerContext, caller_dep, context_dep
from hal.api.data import DataService
from hal.core.data import MAX_DATA_KEYS, parse_data_keys
from hal.core.errors import Unavailable
from hal.state.cluster import Caller

router = APIRouter(prefix="/v1/data", tags=["data"])
Ctx = Annotated[ServerContext, Depends(context_dep)]
Who = Annotated[Caller, Depends(caller_dep)]


class DataHolder(BaseModel):
    instance: str
    size_bytes: int


class DataNodeEstimate(BaseModel):
    """Reading the key on one HAL node: through ``cache`` (its leaf instance; null: none),
    from ``source`` (the nearest holder; null: the origin storage behind the root)."""

    node: str
    cache: str | None
    source: str | None
    local_bytes: int
    moved_bytes: int
    seconds: float
    cost: float


class DataLocation(BaseModel):
    key: str
    size_bytes: int | None = Field(description="null: no cache holds the key")
    holders: list[DataHolder]
    nodes: list[DataNodeEstimate]
    fresh: bool = Field(description="false: the control plane did not answer; last view")
    view_age_seconds: float


class DataStageRequest(BaseModel):
    keys: list[str] = Field(min_length=1, max_length=MAX_DATA_KEYS)
    node: str = Field(min_length=1)


class DataStageResult(BaseModel):
    node: str
    cache: str
    address: str
    keys: list[str]
    held: list[str] = Field(description="the keys the leaf cache holds now")


class CacheCounters(BaseModel):
    """One cache node's read counters since it started (its heartbeats' ``halStats``)."""

    instance: str
    tier: str
    status: str
    hits: int
    misses: int
    misses_not_found: int = Field(description="misses no cache upstream could answer")
    hit_ratio: float | None = Field(description="hits / (hits + misses); null before any read")
    bytes_served: int = Field(description="value bytes sent to clients and to other nodes")
    pulls: dict[str, int] = Field(description="misses answered from upstream, by source")
    bytes_moved: dict[str, int] = Field(description="value bytes pulled in, by source")
    evictions: int
    expirations: int


class DataStatus(BaseModel):
    cache_url: str
    stale: bool
    view_age_seconds: float
    last_error: str
    instances: int
    keys: int
    nodes_with_cache: int
    refreshes: int
    prestage: dict[str, int]
    bytes_staged: int
    staging_queued: int
    caches: list[CacheCounters] = Field(
        description="each HAL cache node's hits, misses and bytes moved, as of its last "
        "heartbeat to the control plane"
    )


def _service(ctx: ServerContext) -> DataService:
    if ctx.data is None:
        raise Unavailable(
            "this server has no data plane: add a [data] table with cache_url to hal.toml"
        )
    return ctx.data


@router.get("/status", response_model=DataStatus)
async def data_status(ctx: Ctx, _caller: Who) -> DataStatus:
    """The data view's age, staleness, pre-staging counts and each cache node's hits,
    misses and bytes moved (``hal data status``)."""
    return DataStatus.model_validate(_service(ctx).status())


@router.get("/locate/{key:path}", response_model=DataLocation)
async def locate(key: str, ctx: Ctx, _caller: Who) -> DataLocation:
    """The key's holders and, per HAL node, the bytes already local and the estimated
    time and cost of moving the rest (``hal data locate KEY``)."""
    service = _service(ctx)
    (key,) = parse_data_keys([key], field_name="key")
    found = await service.locate(key)
    return DataLocation(
        key=found.key,
        size_bytes=found.size,
        holders=[DataHolder(instance=i, size_bytes=n) for i, n in sorted(found.holders.items())],
        nodes=[
            DataNodeEstimate(
                node=e.node,
                cache=e.cache,
                source=e.source,
                local_bytes=e.transfer.local_bytes,
                moved_bytes=e.transfer.moved_bytes,
                seconds=round(e.transfer.seconds, 6),
                cost=round(e.transfer.cost, 6),
            )
            for e in found.nodes
        ],
        fresh=found.fresh,
        view_age_seconds=round(service.view_age(), 3),
    )


@router.post("/stage", response_model=DataStageResult)
async def stage(body: DataStageRequest, ctx: Ctx, _caller: Who) -> DataStageResult:
    """Pull keys into a node's leaf cache now (``hal data stage KEY --node N``)."""
    service = _service(ctx)
    keys = parse_data_keys(body.keys, field_name="keys")
    done = await service.stage(keys, body.node)
    return DataStageResult(
        node=done.node,
        cache=done.cache,
        address=done.address,
        keys=list(done.keys),
        held=[k for k in done.keys if k in done.held],
    )
