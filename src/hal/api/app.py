"""The FastAPI application: routers, error mapping, request-size guard, lifecycle."""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from hal import __version__
from hal.api import (
    errors,
    routes_agent,
    routes_artifacts,
    routes_cloud,
    routes_crontab,
    routes_data,
    routes_events,
    routes_feedback,
    routes_harmonic,
    routes_htc,
    routes_jobs,
    routes_nodes,
    routes_partitions,
    routes_predict,
    routes_priority,
    routes_reservations,
    routes_steps,
    slurmrest,
)
from hal.server.services import Services

# FastAPI (0.16x) hands pydantic (>= 2.12) a plain ``Field(alias=<parameter name>)`` for a
# request body read whole; pydantic warns that the alias has no effect there, which is
# true and harmless (the body is the model), once per server start. Users saw it as an
# alarming line in `hal up`'s output.
warnings.filterwarnings(
    "ignore", message=r"The 'alias' attribute with value .* was provided to the `Field\(\)`"
)


def create_app(
    ctx: Services,
    *,
    on_start: Callable[[], Awaitable[None]] | None = None,
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if on_start is not None:
            await on_start()
        try:
            yield
        finally:
            if on_stop is not None:
                await on_stop()

    app = FastAPI(
        title="HAL control plane",
        version=__version__,
        description="Jobs, nodes, partitions, the event stream and the agent channel.",
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    errors.install(app)
    app.add_middleware(routes_agent.AgentLane)  # innermost: behind the guards and counts
    app.add_middleware(SizeGuard, limit=ctx.config.max_request_bytes)

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        """A browser pointed at the server's URL gets the dashboard (``hal.observe``)."""
        return RedirectResponse("/ui")

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, object]:
        """Alive; ``role``: leader, standby or starting (``GET /v1/ha`` says more)."""
        role = ctx.leadership.role if ctx.leadership is not None else "leader"
        return {
            "status": "ok",
            "version": __version__,
            "revision": ctx.cluster.revision,
            "role": role,
        }

    _document(app)
    for module in (
        routes_jobs,
        routes_nodes,
        routes_partitions,
        routes_agent,
        routes_events,
        routes_htc,
        routes_predict,
        routes_priority,
        routes_data,
        routes_reservations,
        routes_steps,
        routes_crontab,
        routes_cloud,
        routes_artifacts,
        routes_harmonic,
        routes_feedback,
    ):
        app.include_router(module.router)
    app.include_router(routes_artifacts.agent_router)
    app.include_router(routes_artifacts.alias_router)
    app.include_router(routes_artifacts.nodes_router)
    app.include_router(routes_steps.listing)
    app.include_router(routes_feedback.many)
    slurmrest.install(app, ctx)
    return app


ARTIFACTS = "/v1/artifacts/"  # uploads: the registry has its own limit, and streams them


class SizeGuard:
    """Refuse bodies larger than ``limit`` before reading them (413, problem+json).

    A plain ASGI middleware: Starlette's ``BaseHTTPMiddleware`` runs every request in an
    extra task and costs about a millisecond a request, which the submit path cannot afford.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope["path"].startswith(ARTIFACTS):
            for name, value in scope.get("headers", ()):
                if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                    response = errors.problem(
                        413,
                        "payload_too_large",
                        f"request body is {int(value)} bytes; the server accepts at most "
                        f"{self.limit} (split a large batch into several requests)",
                    )
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def _document(app: FastAPI) -> None:
    """Bodies read by ``fastpath.read_body`` are not FastAPI parameters: add their
    schemas to the OpenAPI document so the ``$ref``s in ``openapi_extra`` resolve; and
    document the error answers as ``errors`` makes them (``errors.document``)."""
    from hal.api.fastpath import add_schemas
    from hal.wire.agent import AgentRegister, AgentSync
    from hal.wire.jobs import JobBatchSubmit, JobSubmit
    from hal.wire.steps import (
        StepCancelRequest,
        StepClose,
        StepCreate,
        StepInputChunk,
        StepSignalRequest,
    )

    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()  # FastAPI keeps it as app.openapi_schema
            add_schemas(
                schema,
                [
                    JobSubmit,
                    JobBatchSubmit,
                    AgentRegister,
                    AgentSync,
                    StepCreate,
                    StepClose,
                    StepSignalRequest,
                    StepCancelRequest,
                    StepInputChunk,
                ],
            )
            errors.document(schema)
            routes_events.document(schema)
            routes_jobs.document(schema)
        return app.openapi_schema or build()

    app.openapi = openapi  # type: ignore[method-assign]
