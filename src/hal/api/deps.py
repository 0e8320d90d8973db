"""The routes' FastAPI dependencies: the control plane's services, and who is asking
(a user's token, an administrator's, an agent's), read from the ``Authorization``
header."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Annotated

from fastapi import Header, Request

from hal.core.errors import PermissionDenied, Unauthenticated
from hal.server.auth import TokenCache
from hal.server.services import Services
from hal.state.cluster import Caller

log = logging.getLogger("hal.api")


# Dependencies are ``async`` on purpose: FastAPI runs plain ``def`` dependencies in a
# thread pool, a thread hop per request that cost the submit path ~1 ms.
async def services_dep(request: Request) -> Services:
    ctx: Services = request.app.state.ctx
    return ctx


# A token seen before is answered from memory; only a new one is looked up in the store,
# on a worker thread.
async def caller_dep(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Caller:
    caller = await authenticated(request, authorization)
    if caller.agent:
        raise PermissionDenied(
            f"{caller.name}'s token is an agent token: only the agent channel (/v1/agent) "
            "accepts it; use a user's token (`hal login`, HAL_TOKEN) for anything else"
        )
    return caller


async def authenticated(request: Request, authorization: str | None) -> Caller:
    """The caller of ``authorization`` (``Bearer <token>``), any kind (agents included);
    refuses a missing or unknown token (``Unauthenticated``)."""
    tokens: TokenCache = request.app.state.ctx.tokens
    known = tokens.known(authorization)
    if known is not None:
        return known
    return await asyncio.to_thread(tokens.caller, authorization)


async def admin_dep(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Caller:
    caller = await caller_dep(request, authorization)  # an agent's token: refused there
    if not caller.admin:
        raise PermissionDenied(f"user {caller.name} is not an administrator")
    return caller


async def agent_dep(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Caller:
    """The agent channel's caller: an agent's token (``hal user add NAME --agent``) or,
    as before agent tokens existed, an administrator's, which still works (logged once
    per administrator: whoever reads a node's token then administers the cluster).
    Handlers check the node they serve with ``check_agent_node``."""
    caller = await authenticated(request, authorization)
    if getattr(request.app.state, "agent_mtls", False):
        caller = dataclasses.replace(caller, cert_nodes=_certified(request))
    if caller.agent:
        return caller
    if not caller.admin:
        raise PermissionDenied(
            f"user {caller.name} is no agent: the agent channel takes an agent token; "
            "an administrator creates one with `hal user add NAME --agent`"
        )
    ctx: Services = request.app.state.ctx
    if caller.name not in ctx.admins_as_agents:
        ctx.admins_as_agents.add(caller.name)
        log.warning(
            "an agent authenticates with administrator %s's token: whoever can read it on "
            "the node administers the cluster; give agents an agent token "
            "(`hal user add NAME --agent`, docs/admin/security.md)",
            caller.name,
        )
    return caller


def _certified(request: Request) -> frozenset[str]:
    """The node names the agent's TLS certificate proves (``hal.api.server`` puts them
    in the request's scope); a request without one is refused."""
    tls = request.scope.get("extensions", {}).get("tls", {})
    names = frozenset(tls.get("client_names", ()))
    if not names:
        raise Unauthenticated(
            "this server asks agents for a TLS client certificate (mutual TLS) and this "
            "agent sent none signed by the site CA: give it one (`hal certs issue NODE "
            "--client`) with HAL_TLS_CERT and HAL_TLS_KEY"
        )
    return names


def check_agent_node(caller: Caller, node: str) -> None:
    """Refuse an agent token bound to other nodes (``--nodes``) serving ``node``, and an
    agent whose certificate (mutual TLS) proves other nodes."""
    if caller.cert_nodes is not None and node not in caller.cert_nodes:
        raise PermissionDenied(
            f"the agent's TLS certificate is for {', '.join(sorted(caller.cert_nodes))}, "
            f"not node {node!r}; give the agent its own node's certificate (`hal certs "
            f"issue {node} --client`)"
        )
    if caller.agent and caller.agent_nodes is not None and node not in caller.agent_nodes:
        raise PermissionDenied(
            f"agent token {caller.name} may not serve node {node!r}, only its own nodes; "
            f"use that node's agent token, or create one with "
            f"`hal user add NAME --agent --nodes {node}`"
        )
