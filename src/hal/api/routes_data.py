"""``/v1/data``: where a job input is and what reading it costs on each node, staging
into a node's leaf cache, and the data service's status (``hal data ...``).

Answered by ``hal.server.data.DataService``; 404 ``not_configured`` on a server without a
``[data]`` table. Bad input is a 400 naming the field: a key ``parse_data_keys`` refuses
(a NUL, text that is not UTF-8, ...), a node name no agent could register, a query
parameter (these routes take none), an unknown body field, ``@NAME`` (a dataset of
``[data.datasets]``) where one cache key is asked for, or a dataset name
``[data.datasets]`` does not define.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from hal.api.deps import caller_dep, services_dep
from hal.core.data import DATASET_NAME, MAX_DATA_KEYS, expand_datasets, parse_data_keys
from hal.core.errors import InvalidRequest, NotConfigured
from hal.server.data import DataService
from hal.server.services import Services
from hal.state.cluster import Caller
from hal.wire.agent import NODE_NAME

router = APIRouter(prefix="/v1/data", tags=["data"])
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]


def no_query(request: Request) -> None:
    """Refuse query parameters: these routes take none, and one silently ignored (a
    misspelt path, a filter that does not exist) would answer another question."""
    name = next(iter(request.query_params), None)
    if name is not None:
        raise InvalidRequest(
            f"query parameter {name[:64]!r} is not known: {request.method} "
            f"{request.url.path[:100]} takes no query parameters; remove it",
            field=name[:64],
        )


NoQuery = Annotated[None, Depends(no_query)]


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
    """``keys``: cache keys, or ``@NAME`` for the keys of a dataset in ``[data.datasets]``."""

    model_config = ConfigDict(extra="forbid")

    keys: list[str] = Field(min_length=1, max_length=MAX_DATA_KEYS)
    node: str = Field(pattern=NODE_NAME)  # as an agent registers it


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


def _service(ctx: Services) -> DataService:
    if ctx.data is None:
        raise NotConfigured(
            "this server has no data plane: add a [data] table with cache_url to hal.toml"
        )
    return ctx.data


@router.get("/status", response_model=DataStatus)
async def data_status(ctx: Ctx, _caller: Who, _q: NoQuery) -> DataStatus:
    """The data view's age, staleness, pre-staging counts and each cache node's hits,
    misses and bytes moved (``hal data status``)."""
    return DataStatus.model_validate(_service(ctx).status())


@router.get("/locate/{key:path}", response_model=DataLocation)
async def locate(key: str, ctx: Ctx, _caller: Who, _q: NoQuery) -> DataLocation:
    """The key's holders and, per HAL node, the bytes already local and the estimated
    time and cost of moving the rest (``hal data locate KEY``)."""
    service = _service(ctx)
    key = locate_key(key, ctx.config.datasets)
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
async def stage(body: DataStageRequest, ctx: Ctx, _caller: Who, _q: NoQuery) -> DataStageResult:
    """Pull keys into a node's leaf cache now (``hal data stage KEY --node N``); ``@NAME``
    stands for the keys of that dataset in ``[data.datasets]``, as in ``--data``."""
    service = _service(ctx)
    keys = parse_data_keys(body.keys, field_name="keys")
    keys = expand_datasets(keys, ctx.config.datasets, field_name="keys")
    done = await service.stage(keys, body.node)
    return DataStageResult(
        node=done.node,
        cache=done.cache,
        address=done.address,
        keys=list(done.keys),
        held=[k for k in done.keys if k in done.held],
    )


def locate_key(key: str, datasets: Mapping[str, tuple[str, ...]]) -> str:
    """The one cache key of ``GET /v1/data/locate/{key}``, or a 400 saying what is wrong."""
    if not key:
        raise InvalidRequest(
            "key: missing; GET /v1/data/locate/{key} takes one cache key (hal data locate KEY)",
            field="key",
        )
    (key,) = parse_data_keys([key], field_name="key")
    if key.startswith(DATASET_NAME):
        found = expand_datasets([key], datasets, field_name="key")  # unknown: a 400
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise InvalidRequest(
            f"key: {key} names a dataset of {len(found)} keys ([data.datasets]), not one "
            f"cache key; locate one of its keys: {shown}",
            field="key",
        )
    return key
