"""``/v1/reservations``: advance reservations (``scontrol create|show|update|delete
reservation``). Anyone may list them; only administrators change them. Flags are words
in Slurm's order, ``PURGE_COMP=<seconds>`` with its time; ``nodes: ["ALL"]`` is every
node; a create without ``name`` gets one (``root_3``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response

from hal.api.deps import caller_dep, services_dep
from hal.core.errors import InvalidRequest
from hal.core.reservation import Reservation, ReservationFlag, flag_words, read_flags
from hal.server.services import Services
from hal.state import reservations
from hal.state.cluster import Caller, Cluster
from hal.state.reservations import ReservationRequest
from hal.wire.reservations import (
    ReservationCreate,
    ReservationInfo,
    ReservationList,
    ReservationUpdate,
)

router = APIRouter(prefix="/v1/reservations", tags=["reservations"])
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]


def reservation_info(r: Reservation, cluster: Cluster) -> ReservationInfo:
    now = cluster.clock.now()
    cores = sum(cluster.nodes[n].resources.cpus for n in r.nodes if n in cluster.nodes)
    return ReservationInfo(
        name=r.name,
        start_time=r.start,
        end_time=r.end,
        duration_seconds=r.duration,
        nodes=list(r.nodes),
        node_count=len(r.nodes),
        core_count=cores,
        users=list(r.users),
        accounts=list(r.accounts),
        flags=flag_words(r),
        partition=r.partition,
        state="ACTIVE" if r.active(now) else "INACTIVE",
    )


def _flags(words: list[str] | None) -> tuple[frozenset[ReservationFlag] | None, float | None]:
    if words is None:
        return None, None
    try:
        return read_flags(",".join(words))
    except ValueError as err:
        raise InvalidRequest(str(err), field="flags") from None


def _names(words: list[str] | None) -> tuple[str, ...] | None:
    if words is None:
        return None
    return tuple(w.strip() for w in words if w.strip())


@router.get("", response_model=ReservationList)
async def list_reservations(ctx: Ctx, _caller: Who) -> ReservationList:
    c = ctx.cluster
    return ReservationList(reservations=[reservation_info(r, c) for r in reservations.current(c)])


@router.get("/{name}", response_model=ReservationInfo)
async def show_reservation(name: str, ctx: Ctx, _caller: Who) -> ReservationInfo:
    return reservation_info(reservations.get(ctx.cluster, name), ctx.cluster)


def _request(name: str, body: ReservationCreate | ReservationUpdate) -> ReservationRequest:
    flags, purge = _flags(body.flags)
    return ReservationRequest(
        name=name,
        start=body.start_time,
        end=body.end_time,
        duration=body.duration_seconds,
        nodes=_names(body.nodes),
        node_count=body.node_count,
        users=_names(body.users),
        accounts=_names(body.accounts),
        flags=flags,
        partition=body.partition,
        purge_after=purge,
    )


@router.post("", status_code=201, response_model=ReservationInfo)
async def create_reservation(body: ReservationCreate, ctx: Ctx, caller: Who) -> ReservationInfo:
    r = await reservations.create(ctx.cluster, caller, _request(body.name, body))
    return reservation_info(r, ctx.cluster)


@router.patch("/{name}", response_model=ReservationInfo)
async def update_reservation(
    name: str, body: ReservationUpdate, ctx: Ctx, caller: Who
) -> ReservationInfo:
    r = await reservations.update(ctx.cluster, caller, _request(name, body))
    return reservation_info(r, ctx.cluster)


@router.delete("/{name}", status_code=204)
async def delete_reservation(name: str, ctx: Ctx, caller: Who) -> Response:
    await reservations.delete(ctx.cluster, caller, name)
    return Response(status_code=204)
