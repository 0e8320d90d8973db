"""``/v1/agent``: the agent channel (see ``hal.wire.agent``). Agents use an admin token."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from hal.api.context import ServerContext, admin_dep, context_dep
from hal.api.convert import nul_field
from hal.api.fastpath import body_schema, json_response, read_body
from hal.core.errors import InvalidRequest
from hal.state import agents
from hal.state.cluster import Caller
from hal.wire.agent import AgentInstructions, AgentRegister, AgentRegistered, AgentSync

router = APIRouter(prefix="/v1/agent", tags=["agent"])
Ctx = Annotated[ServerContext, Depends(context_dep)]
Admin = Annotated[Caller, Depends(admin_dep)]


@router.post(
    "/register", response_model=AgentRegistered, openapi_extra=body_schema("AgentRegister")
)
async def register(request: Request, ctx: Ctx, _agent: Admin) -> Response:
    body = await read_body(request, AgentRegister)
    nul = nul_field(body.model_dump())
    if nul is not None:  # PostgreSQL's text columns cannot store one: a 500, not a 400
        raise InvalidRequest(f"{nul}: holds a NUL character (\\u0000); remove it", field=nul)
    return json_response(await agents.register(ctx.cluster, body))


@router.post(
    "/{node}/sync", response_model=AgentInstructions, openapi_extra=body_schema("AgentSync")
)
async def sync(node: str, request: Request, ctx: Ctx, _agent: Admin) -> Response:
    body = await read_body(request, AgentSync)
    return json_response(await agents.sync(ctx.cluster, node, body))
