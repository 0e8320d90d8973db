"""``/v1/artifacts``: the artifact registry (docs/user/artifacts.md, ADR 0020).

Anyone may list, read and download; publishing a version streams the request body into
the state store (``hal.state.artifacts``), within ``max_artifact_bytes`` rather than the
request-size guard. Agents download by digest on their own channel
(``/v1/agent/artifacts/{sha256}``): a job's nodes fetch what it pinned, through the
cache tree when ``[data]`` names one (``.../{sha256}/route``: ``hal.server.artifact_tree``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import StreamingResponse

from hal.api.deps import agent_dep, caller_dep, check_agent_node, services_dep
from hal.core.artifacts import SHA256, Artifact
from hal.core.errors import InvalidRequest, NotFound
from hal.server.services import Services
from hal.state.cluster import Caller
from hal.state.rollout import Alias, parse_share
from hal.wire.artifacts import (
    KIND_HEADER,
    SHA256_HEADER,
    AliasInfo,
    AliasList,
    AliasMove,
    ArtifactInfo,
    ArtifactList,
    ArtifactNodes,
    ArtifactRoute,
    NodeCopy,
    NodeInventory,
)

router = APIRouter(prefix="/v1/artifacts", tags=["artifacts"])
agent_router = APIRouter(prefix="/v1/agent/artifacts", tags=["agent"])
# (beside /v1/artifacts: an alias or "nodes" there would read as a version)
alias_router = APIRouter(prefix="/v1/artifact-aliases", tags=["artifacts"])
nodes_router = APIRouter(prefix="/v1/artifact-nodes", tags=["artifacts"])
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]
Agent = Annotated[Caller, Depends(agent_dep)]


def info(a: Artifact) -> ArtifactInfo:
    return ArtifactInfo(
        name=a.name, version=a.version, sha256=a.sha256, size=a.size, owner=a.owner,
        created=a.created, kind=a.kind,
    )  # fmt: skip


@router.get("", response_model=ArtifactList)
async def list_artifacts(ctx: Ctx, _caller: Who, name: str | None = None) -> ArtifactList:
    return ArtifactList(artifacts=[info(a) for a in ctx.artifacts.listing(name)])


@router.get("/{name}/{version}", response_model=ArtifactInfo)
async def show_artifact(name: str, version: str, ctx: Ctx, _caller: Who) -> ArtifactInfo:
    """One version; ``latest``: the newest; an alias: the version it names."""
    return info(_find(ctx, name, version))


def _find(ctx: Services, name: str, version: str) -> Artifact:
    named = ctx.artifacts.aliases.by_key.get((name, version))
    if named is not None and (name, version) not in ctx.artifacts.index:
        version = named.version
    return ctx.artifacts.find(name, version)


_FILE_BODY = {  # the body is the file itself, streamed (OpenAPI: a binary string)
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


# 200 as well as 201 (the schema said 201 alone; the fuzzing run caught it)
_SAME_AGAIN: dict[int | str, dict[str, object]] = {
    200: {"model": ArtifactInfo, "description": "that version with the same content was there"}
}


@router.put(
    "/{name}/{version}",
    response_model=ArtifactInfo,
    status_code=201,
    responses=_SAME_AGAIN,
    openapi_extra=_FILE_BODY,
)
async def publish_artifact(
    name: str,
    version: str,
    request: Request,
    response: Response,
    ctx: Ctx,
    caller: Who,
    sha256: Annotated[str | None, Header(alias=SHA256_HEADER)] = None,
    kind: str | None = None,
) -> ArtifactInfo:
    """Publish ``name@version`` from the request body (the file, as it is). 201: a new
    version; 200: that version with the same content was there already; 409: it is there
    with other content (versions never change). With ``X-HAL-SHA256`` the content must
    have that digest, or nothing is stored. ``kind``: ``archive`` (the nodes unpack it)
    or ``program`` (kept as it is); without it, a tar, zip or compressed file is an
    archive."""
    if sha256 is not None and not SHA256.fullmatch(sha256):
        message = f"{SHA256_HEADER} must be 64 lower-case hex digits"
        raise InvalidRequest(message, field=SHA256_HEADER)
    artifact, new = await ctx.artifacts.publish(
        name, version, caller, request.stream(), sha256, kind
    )
    if not new:
        response.status_code = 200
    return info(artifact)


@router.delete("/{name}/{version}", response_model=ArtifactInfo)
async def remove_artifact(name: str, version: str, ctx: Ctx, caller: Who) -> ArtifactInfo:
    """Refused while a job that has not ended pins the version."""
    return info(await ctx.artifacts.remove(name, version, caller))


class Content(StreamingResponse):
    """An artifact's bytes, so the OpenAPI document says ``application/octet-stream``
    (FastAPI documents a plain ``StreamingResponse`` as JSON)."""

    media_type = "application/octet-stream"


@router.get("/{name}/{version}/content", response_class=Content)
async def download_artifact(name: str, version: str, ctx: Ctx, _caller: Who) -> Content:
    return await _stream(ctx, _find(ctx, name, version), "user")


@agent_router.get("/{sha256}", response_class=Content)
async def agent_download(sha256: str, ctx: Ctx, _agent: Agent) -> Content:
    """The content a job pinned, for its node's agent."""
    return await _stream(ctx, _by_digest(ctx, sha256), "agent")


@agent_router.get("/{sha256}/route", response_model=ArtifactRoute)
async def agent_route(sha256: str, node: str, ctx: Ctx, agent: Agent) -> ArtifactRoute:
    """How ``node``'s agent gets the content: through its leaf cache, the pieces in its
    tree's root by now (``hal.server.artifact_tree``), or from this server (no cache
    tree, or it cannot take the content now: ``reason``)."""
    check_agent_node(agent, node)
    found = _by_digest(ctx, sha256)
    if ctx.data is None:
        reason = "no cache tree is configured ([data] in hal.toml)"
        return ArtifactRoute(sha256=sha256, size=found.size, reason=reason)
    return await ctx.data.artifacts.route(ctx.artifacts, found, node)


def _by_digest(ctx: Services, sha256: str) -> Artifact:
    found = next((a for a in ctx.artifacts.index.values() if a.sha256 == sha256), None)
    if found is None:
        raise NotFound(f"no artifact has the content {sha256}: it was removed")
    return found


async def _stream(ctx: Services, artifact: Artifact, to: str) -> Content:
    """The content; ``to``: "agent" or "user", for the ``hal_artifact_*`` metrics."""
    registry = ctx.artifacts
    await registry.check_content(artifact)
    registry.downloads[to] += 1

    async def body() -> AsyncIterator[bytes]:
        async for piece in registry.pieces(artifact.sha256):
            registry.served_bytes[to] += len(piece)
            yield piece

    headers = {
        "Content-Length": str(artifact.size),
        SHA256_HEADER: artifact.sha256,
        KIND_HEADER: artifact.kind,
    }
    return Content(body(), headers=headers)


# -- aliases (hal.state.rollout) ------------------------------------------------------------


def alias_info(ctx: Services, a: Alias) -> AliasInfo:
    index = ctx.artifacts.index
    version, canary = index.get((a.name, a.version)), index.get((a.name, a.canary))
    ran, ran_old = a.counts.get(a.canary, [0, 0]), a.counts.get(a.version, [0, 0])
    return AliasInfo(
        name=a.name,
        alias=a.alias,
        version=a.version,
        sha256=version.sha256 if version else "",
        canary=a.canary,
        canary_sha256=canary.sha256 if canary else "",
        share=a.share,
        since=a.since,
        history=list(a.history),
        changed_by=a.changed_by,
        canary_jobs=ran[0],
        canary_failed=ran[1],
        previous_jobs=ran_old[0],
        previous_failed=ran_old[1],
        rolled_back=a.rolled_back,
    )


@alias_router.get("/{name}", response_model=AliasList)
async def list_aliases(name: str, ctx: Ctx, _caller: Who) -> AliasList:
    return AliasList(aliases=[alias_info(ctx, a) for a in ctx.artifacts.aliases.of(name)])


@alias_router.put("/{name}/{alias}", response_model=AliasInfo)
async def promote(name: str, alias: str, move: AliasMove, ctx: Ctx, caller: Who) -> AliasInfo:
    """Point ``name@alias`` at ``move.version``; with ``canary`` ("10%"), give that
    share of the jobs naming the alias the version instead (its owner, or an
    administrator)."""
    share = parse_share(move.canary) if move.canary is not None else None
    moved = await ctx.artifacts.aliases.promote(name, move.version, alias, caller, share)
    return alias_info(ctx, moved)


@alias_router.post("/{name}/{alias}/rollback", response_model=AliasInfo)
async def rollback(name: str, alias: str, ctx: Ctx, caller: Who) -> AliasInfo:
    """End the alias's canary; without one, point it at the version it named before."""
    return alias_info(ctx, await ctx.artifacts.aliases.rollback(name, alias, caller))


# -- what the nodes hold ----------------------------------------------------------------


@nodes_router.get("", response_model=ArtifactNodes)
async def artifact_nodes(ctx: Ctx, _caller: Who, name: str | None = None) -> ArtifactNodes:
    """Each node's artifact cache as its agent last reported it: its copies (of ``name``'s
    versions only, when given; Python environments only without it)."""
    versions: dict[str, list[str]] = {}
    for a in ctx.artifacts.index.values():
        if name is None or a.name == name:
            versions.setdefault(a.sha256, []).append(f"{a.name}@{a.version}")
    out = []
    for node, session in sorted(ctx.cluster.agent_sessions.items()):
        if session.cache is None:
            continue
        at, report = session.cache
        copies = []
        for c in report.copies:
            sha256, _, suffix = c.name.partition(".")
            kind = {"": "archive", "program": "program", "venv": "python-env"}.get(suffix, suffix)
            named = sorted(versions.get(sha256, [])) if kind != "python-env" else []
            if name is not None and not named:
                continue
            copies.append(
                NodeCopy(
                    sha256=sha256, kind=kind, size=c.size, used=c.used, held=c.held, versions=named
                )
            )
        out.append(
            NodeInventory(
                node=node,
                reported=at,
                limit_bytes=report.limit_bytes,
                used_bytes=sum(c.size for c in report.copies),
                copies=copies,
            )
        )
    return ArtifactNodes(nodes=out)
