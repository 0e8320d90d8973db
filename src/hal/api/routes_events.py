"""``/v1/events``: server-sent events of job and node changes, resumable by event id.

Each SSE message carries ``id:`` (the event's row id). A client that reconnects with
``Last-Event-ID`` (or ``?after=``) gets everything after it, read from the durable event
log, so no change is missed across disconnects or server restarts.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header
from fastapi.responses import StreamingResponse

from hal.api.deps import caller_dep, services_dep
from hal.server.services import Services
from hal.state.cluster import Caller
from hal.state.store import StoredEvent

router = APIRouter(prefix="/v1", tags=["events"])
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]
KEEPALIVE_S = 15.0
# A follower is written to at most once per this many seconds while events keep coming:
# during a burst each write gathers the events of the interval instead of sending one
# message per commit (each a socket send through the middleware stack). An idle stream
# still gets the next event at once.
COALESCE_S = 0.01


# One message of the stream, as OpenAPI 3.2's ``itemSchema`` describes the items of a
# sequential media type (``_message`` writes it; ``data`` is the event as JSON)
EVENT_ITEM: dict[str, object] = {
    "type": "object",
    "required": ["id", "event", "data"],
    "properties": {
        "id": {"type": "string", "pattern": "^[0-9]+$"},
        "event": {"type": "string"},
        "data": {"type": "string", "contentMediaType": "application/json"},
    },
}


def document(openapi: dict[str, Any]) -> None:
    """Say in ``openapi`` what one message of ``/v1/events`` is: FastAPI documents the
    stream as a single string, which tools that read events one by one check each
    message against."""
    content = openapi["paths"]["/v1/events"]["get"]["responses"]["200"]["content"]
    content[EventStream.media_type] = {"itemSchema": EVENT_ITEM}


class EventStream(StreamingResponse):
    """What ``/v1/events`` answers, so the OpenAPI document says ``text/event-stream``
    (FastAPI documents a plain ``StreamingResponse`` as JSON)."""

    media_type = "text/event-stream"


@router.get("/events", response_class=EventStream)
async def events(
    ctx: Ctx,
    _caller: Who,
    after: int = 0,
    follow: bool = True,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventStream:
    start = after
    if last_event_id and last_event_id.isdigit():
        start = int(last_event_id)
    return EventStream(_stream(ctx, start, follow), headers={"Cache-Control": "no-cache"})


def _message(e: StoredEvent) -> str:
    body = {
        "id": e.id,
        "time": e.time,
        "kind": e.kind,
        "job_id": e.job_id,
        "node": e.node,
        "state": e.state,
        "data": e.data,
    }
    return f"id: {e.id}\nevent: {e.kind}\ndata: {json.dumps(body)}\n\n"


async def _stream(ctx: Services, after: int, follow: bool) -> AsyncIterator[str]:
    cluster = ctx.cluster
    cursor = after
    loop = asyncio.get_running_loop()
    written = -COALESCE_S
    while True:
        # recent events come from memory; a client far behind catches up from the store
        found = cluster.events_since(cursor, 1000)
        batch = (
            found
            if found is not None
            else await cluster.db(cluster.store.events_after, cursor, 1000)
        )
        if batch:
            yield "".join(_message(e) for e in batch)  # one write for the whole batch
            cursor = batch[-1].id
            written = loop.time()
        if len(batch) == 1000:
            continue
        if not follow or cluster.closing:
            return
        keepalive = False
        async with cluster.events_changed:
            # an event committed while this stream was writing notified before this wait
            if not (batch and cluster.revision > cursor):
                try:
                    await asyncio.wait_for(cluster.events_changed.wait(), KEEPALIVE_S)
                except TimeoutError:
                    keepalive = True
        if keepalive:  # (written outside the condition: a slow client must not hold it)
            yield ": keepalive\n\n"
            continue
        wait = written + COALESCE_S - loop.time()
        if wait > 0:
            await asyncio.sleep(wait)
