"""``/v1/agent``: the agent channel (see ``hal.wire.agent``). Agents use an agent token
(``hal user add NAME --agent``, bound to nodes with ``--nodes``), or an administrator's
as before agent tokens existed (``context.agent_dep``); no other route accepts an agent
token."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from hal.api.convert import nul_field
from hal.api.deps import agent_dep, check_agent_node, services_dep
from hal.api.fastpath import body_schema, json_response, read_body
from hal.core.errors import InvalidRequest
from hal.server.services import Services
from hal.state import agents
from hal.state.cluster import Caller
from hal.wire.agent import (
    AgentInstructions,
    AgentRegister,
    AgentRegistered,
    AgentSync,
    RunningStep,
)

router = APIRouter(prefix="/v1/agent", tags=["agent"])
PREFIX = router.prefix + "/"
Ctx = Annotated[Services, Depends(services_dep)]
Agent = Annotated[Caller, Depends(agent_dep)]


@router.post(
    "/register", response_model=AgentRegistered, openapi_extra=body_schema("AgentRegister")
)
async def register(request: Request, ctx: Ctx, agent: Agent) -> Response:
    body = await read_body(request, AgentRegister)
    check_agent_node(agent, body.node)
    nul = nul_field(body.model_dump())
    if nul is not None:  # PostgreSQL's text columns cannot store one: a 500, not a 400
        raise InvalidRequest(f"{nul}: holds a NUL character (\\u0000); remove it", field=nul)
    try:
        registered = await agents.register(ctx.cluster, body, request.is_disconnected)
    except agents.AgentGone:  # it stopped waiting and registers again (nginx's 499)
        return Response(status_code=499)
    running = ctx.steps.held(body.node, body.steps)
    unknown = await ctx.steps.node_registered(body.node, running)
    registered.kill_steps = [RunningStep(job_id=j, attempt=a, step_id=s) for j, a, s in unknown]
    return json_response(registered)


@router.post(
    "/{node}/sync", response_model=AgentInstructions, openapi_extra=body_schema("AgentSync")
)
async def sync(node: str, request: Request, ctx: Ctx, agent: Agent) -> Response:
    check_agent_node(agent, node)
    body = await read_body(request, AgentSync)
    if body.step_output or body.step_ends or body.step_bad_exits or body.step_input_fed:
        await ctx.steps.received(
            node, body.step_output, body.step_ends, body.step_bad_exits, body.step_input_fed
        )
    if body.usage or body.step_usage:  # a heartbeat's sample (flushes carry none)
        ctx.steps.sampled(node, body.step_usage)
    if body.traffic and ctx.traffic is not None:  # who its jobs talk to (hal.server.traffic)
        ctx.traffic.received(node, body.traffic)
    return json_response(await agents.sync(ctx.cluster, node, body))


class AgentLane:
    """The agent channel served straight from ASGI: a plain middleware (as ``SizeGuard``)
    that ``hal.api.app`` installs innermost, so the role gate, the request counts and the
    size guard see these requests as any other.

    10,000 agents long-poll the server: FastAPI 0.16x's routing walks its route table
    twice a request (about 40 route matches, each through its telemetry's scope keys)
    and solves the handlers' dependencies by introspection; together about four fifths of
    a sync's CPU (``bench/heartbeat_edge.py``). This lane finds ``register`` and
    ``{node}/sync`` with two string tests, calls the same dependencies and handlers as
    the FastAPI routes (which stay: the OpenAPI document, and any other method on these
    paths), and maps what they raise with the application's own exception handlers, so
    the answers are the same bytes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        by_path = {r.path: r for r in router.routes if isinstance(r, APIRoute)}
        self.register = by_path[PREFIX + "register"]
        self.sync = by_path[PREFIX + "{node}/sync"]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        path = _route_path(scope)
        if not path.startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        rest = path[len(PREFIX) :]
        node, _, tail = rest.partition("/")
        if rest == "register":
            route, params = self.register, {}
        elif tail == "sync" and node:  # (Starlette's ``{node}``: one segment, not empty)
            route, params = self.sync, {"node": node}
        else:
            await self.app(scope, receive, send)
            return
        scope["route"], scope["path_params"] = route, params  # (``CountRequests`` reads it)
        request = Request(scope, receive)
        try:
            ctx = await services_dep(request)
            agent = await agent_dep(request, request.headers.get("authorization"))
            if route is self.register:
                response = await register(request, ctx, agent)
            else:
                response = await sync(params["node"], request, ctx, agent)
        except Exception as err:
            handler = _handler(request, err)
            if handler is None:
                raise
            response = await handler(request, err)
        await response(scope, receive, send)


def _handler(
    request: Request, err: Exception
) -> Callable[[Request, Exception], Awaitable[Response]] | None:
    """The application's handler for ``err`` (its class's, else its nearest base's), as
    Starlette's ``ExceptionMiddleware`` looks it up; ``Exception``'s is its outer
    ``ServerErrorMiddleware``'s, reached by raising."""
    handlers = request.app.exception_handlers
    for cls in type(err).__mro__:
        if cls is Exception:
            break
        if cls in handlers:
            found: Callable[[Request, Exception], Awaitable[Response]] = handlers[cls]
            return found
    return None


def _route_path(scope: Scope) -> str:
    """The path the routes match: ``path`` without the ``root_path`` a proxy mounted the
    application under (as Starlette's routing sees it; HAL's own server sets none)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path
