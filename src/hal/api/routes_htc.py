"""``/v1/htc``: high-throughput sessions (list, show, open, attach, cancel) and the HTC
broker's channel for worker jobs.

The broker is its own process (``hal.htc.process``), started on the first session and
stopped with the app through this router's lifespan. Users authenticate here, over REST;
the router then asks the broker over its control port. The broker in turn asks the
control plane for worker jobs at ``/v1/htc/internal/workers``, authenticated by the key
this router gave it: that endpoint is the one seam through which HTC reaches the job
state (jobs are submitted as the session's user, so batch and HTC share one account).
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Request

from hal.api.deps import caller_dep, services_dep
from hal.api.submit import spec_of
from hal.core.errors import (
    ERRORS_BY_CODE,
    Conflict,
    HalError,
    InvalidRequest,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from hal.htc.controlplane import KEY_HEADER
from hal.htc.journal import default_dir
from hal.htc.process import BrokerProcess, BrokerUnavailable
from hal.htc.records import SessionRecords
from hal.htc.rest import (
    SESSION_ID,
    SessionInfo,
    SessionList,
    SessionOptions,
    SessionTicket,
    WorkerSync,
    WorkerSyncReply,
    check_options,
)
from hal.server.services import Services
from hal.state import commands
from hal.state.cluster import Caller
from hal.wire.jobs import JobSubmit

HTC_CALLER = Caller("hal-htc", admin=True)  # cancels worker jobs it started


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    ctx: Services = app.state.ctx
    if ctx.observe is not None:
        ctx.observe.metrics.htc_stats = lambda: htc_stats(ctx)
    yield
    broker = ctx.htc_broker
    if broker is not None:
        await broker.stop()


router = APIRouter(prefix="/v1/htc", tags=["htc"], lifespan=lifespan)
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]


async def broker_of(ctx: Ctx) -> BrokerProcess:
    """The HTC broker process, made at the first HTC request."""
    broker = ctx.htc_broker
    if broker is None:
        url = ctx.cluster.store.url
        broker = ctx.htc_broker = BrokerProcess(db_url=url, journal_dir=default_dir(url))
    return broker


Broker = Annotated[BrokerProcess, Depends(broker_of)]


def htc_stats(ctx: Services) -> dict[str, Any] | None:
    """For ``/metrics``: the broker's last report (pushed with its worker sync, ~4/s), so
    a scrape never waits on the broker; None when no broker runs."""
    broker = ctx.htc_broker
    stats = broker.stats() if broker is not None else None
    return stats.model_dump() if stats is not None else None


async def ask(broker: BrokerProcess, op: str, args: dict[str, Any]) -> Any:
    try:
        ok, data = await broker.request(op, args)
    except BrokerUnavailable as err:
        raise Unavailable(f"{err}; try again, or see the server's log") from err
    if not ok:
        cls = ERRORS_BY_CODE.get(str(data.get("code")), HalError)
        raise cls(str(data.get("message")))
    return data


def known_id(session_id: str) -> str:
    """``session_id`` if it has the shape of one; else 404 without asking anyone (a NUL in
    it made PostgreSQL fail the lookup: a 500)."""
    if not re.fullmatch(SESSION_ID, session_id):
        shown = session_id if len(session_id) <= 40 else session_id[:40] + "..."
        raise NotFound(
            f"no HTC session {shown!r}: ids look like s0123456789ab; "
            "`hal htc sessions --all` lists them"
        )
    return session_id


def stored(ctx: Services, session_id: str | None, user: str | None) -> list[SessionInfo]:
    records = SessionRecords(ctx.cluster.store.url)
    try:
        return [SessionInfo.model_validate(r) for r in records.load(session_id, user)]
    finally:
        records.close()


@router.post("/sessions", status_code=201, response_model=SessionTicket)
async def open_session(
    body: SessionOptions, request: Request, ctx: Ctx, broker: Broker, caller: Who
) -> SessionTicket:
    # Refused now, not after its worker jobs were refused 3 times (the session FAILED).
    check_options(body)
    for name in (body.partition or "").split(","):
        if name.strip() and name.strip() not in ctx.cluster.partitions:
            known = ", ".join(sorted(ctx.cluster.partitions))
            raise InvalidRequest(
                f"partition: no partition {name.strip()!r} (known: {known})", field="partition"
            )
    try:
        await broker.ensure(str(request.base_url).rstrip("/"))
    except BrokerUnavailable as err:
        raise Unavailable(str(err)) from err
    data = await ask(broker, "open", {"user": caller.name, "options": body.model_dump()})
    return SessionTicket.model_validate(data)


@router.get("/sessions", response_model=SessionList)
async def list_sessions(ctx: Ctx, broker: Broker, caller: Who, all: bool = False) -> SessionList:
    """Live sessions (the broker's view); with ``all``, also ended ones from the record."""
    user = None if caller.admin else caller.name
    live: list[SessionInfo] = []
    if broker.running:
        live = [SessionInfo.model_validate(s) for s in await ask(broker, "list", {"user": user})]
    if all:
        seen = {s.id for s in live}
        past = await ctx.cluster.db(stored, ctx, None, user)
        live += [s for s in past if s.id not in seen]
    live.sort(key=lambda s: s.created)
    return SessionList(sessions=live)


@router.get("/sessions/{session_id}", response_model=SessionInfo)
async def show_session(session_id: str, ctx: Ctx, broker: Broker, caller: Who) -> SessionInfo:
    known_id(session_id)
    info: SessionInfo | None = None
    if broker.running:
        with contextlib.suppress(NotFound):
            info = SessionInfo.model_validate(await ask(broker, "show", {"session": session_id}))
    if info is None:
        return await recorded(ctx, session_id, caller)
    if not caller.admin and info.user != caller.name:
        raise PermissionDenied(f"session {session_id} belongs to {info.user}")
    return info


async def recorded(ctx: Services, session_id: str, caller: Caller) -> SessionInfo:
    """The session as the database recorded it, if ``caller`` may see it."""
    found = await ctx.cluster.db(stored, ctx, session_id, None)
    if not found:
        raise NotFound(f"no HTC session {session_id}; `hal htc sessions --all` lists them")
    info = found[0]
    if not caller.admin and info.user != caller.name:
        raise PermissionDenied(f"session {session_id} belongs to {info.user}")
    return info


@router.post("/sessions/{session_id}/attach", response_model=SessionTicket)
async def attach_session(
    session_id: str, request: Request, broker: Broker, caller: Who
) -> SessionTicket:
    known_id(session_id)
    # A broker that died is started again: it reopens the journaled sessions.
    try:
        await broker.ensure(str(request.base_url).rstrip("/"))
    except BrokerUnavailable as err:
        raise Unavailable(str(err)) from err
    args = {"session": session_id, "user": caller.name, "admin": caller.admin}
    return SessionTicket.model_validate(await ask(broker, "attach", args))


@router.delete("/sessions/{session_id}", response_model=SessionInfo)
async def cancel_session(session_id: str, ctx: Ctx, broker: Broker, caller: Who) -> SessionInfo:
    known_id(session_id)
    args = {"session": session_id, "user": caller.name, "admin": caller.admin}
    if broker.running:
        with contextlib.suppress(NotFound):  # not live: the record says what became of it
            return SessionInfo.model_validate(await ask(broker, "cancel", args))
    info = await recorded(ctx, session_id, caller)
    if info.state in ("OPEN", "CLOSED"):  # recorded as live, but no broker runs it now
        return SessionInfo.model_validate(await ask(broker, "cancel", args))
    raise Conflict(f"session {session_id} already ended {info.state}; nothing to cancel")


@router.post("/internal/workers", response_model=WorkerSyncReply, include_in_schema=False)
async def sync_workers(
    body: WorkerSync,
    ctx: Ctx,
    broker: Broker,
    key: Annotated[str, Header(alias=KEY_HEADER)] = "",
) -> WorkerSyncReply:
    if not key or not secrets.compare_digest(key, broker.key):
        raise PermissionDenied("only the HTC broker started by this server may call this")
    if body.stats is not None:
        broker.report(body.stats)
    cluster = ctx.cluster
    reply = WorkerSyncReply()
    for launch in body.launch:
        job = JobSubmit(
            script=launch.script,
            name=launch.name,
            workdir=launch.workdir,
            environment=launch.environment,
            stdout=launch.output,
            stderr=launch.output,
            partition=launch.partition,
            cpus_per_task=launch.cpus,
            memory_per_node_bytes=launch.memory_bytes,
            time_limit_seconds=launch.time_limit_seconds,
            requeue=False,  # a lost worker is replaced by the broker, not requeued
            comment=f"HTC worker for session {launch.session}",
        )
        try:
            spec = spec_of(ctx, job, launch.user)
            done = await cluster.submit([spec])
            reply.launched.append(done[0].job_id)
            reply.errors.append("")
        except HalError as err:
            reply.launched.append(0)
            reply.errors.append(err.message)
    for job_id in body.cancel:
        with contextlib.suppress(HalError):
            await commands.cancel(cluster, str(job_id), HTC_CALLER)
    for job_id in body.watch:
        known = cluster.jobs.get(job_id)
        reply.states[job_id] = known.state.value if known is not None else "GONE"
    reply.capacity_cpus = sum(n.resources.cpus for n in cluster.nodes.values() if n.schedulable)
    return reply
