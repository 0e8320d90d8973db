"""``/v1/agent``: the agent channel (see ``hal.wire.agent``). Agents use an agent token
(``hal user add NAME --agent``, bound to nodes with ``--nodes``), or an administrator's
as before agent tokens existed (``context.agent_dep``); no other route accepts an agent
token."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

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
