"""``/v1/artifacts``: the artifact registry (docs/user/artifacts.md, ADR 0020).

Anyone may list, read and download; publishing a version streams the request body into
the state store (``hal.state.artifacts``), within ``max_artifact_bytes`` rather than the
request-size guard. Agents download by digest on their own channel
(``/v1/agent/artifacts/{sha256}``): a job's nodes fetch what it pinned.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import StreamingResponse

from hal.api.deps import agent_dep, caller_dep, services_dep
from hal.core.artifacts import SHA256, Artifact
from hal.core.errors import InvalidRequest, NotFound
from hal.server.services import Services
from hal.state.cluster import Caller
from hal.wire.artifacts import KIND_HEADER, SHA256_HEADER, ArtifactInfo, ArtifactList

router = APIRouter(prefix="/v1/artifacts", tags=["artifacts"])
agent_router = APIRouter(prefix="/v1/agent/artifacts", tags=["agent"])
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
    """One version; ``latest``: the newest."""
    return info(ctx.artifacts.find(name, version))


_FILE_BODY = {  # the body is the file itself, streamed (OpenAPI: a binary string)
    "requestBody": {
        "required": True,
        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
    }
}


@router.put(
    "/{name}/{version}", response_model=ArtifactInfo, status_code=201, openapi_extra=_FILE_BODY
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


@router.get("/{name}/{version}/content")
async def download_artifact(name: str, version: str, ctx: Ctx, _caller: Who) -> StreamingResponse:
    return await _stream(ctx, ctx.artifacts.find(name, version), "user")


@agent_router.get("/{sha256}")
async def agent_download(sha256: str, ctx: Ctx, _agent: Agent) -> StreamingResponse:
    """The content a job pinned, for its node's agent."""
    found = next((a for a in ctx.artifacts.index.values() if a.sha256 == sha256), None)
    if found is None:
        raise NotFound(f"no artifact has the content {sha256}: it was removed")
    return await _stream(ctx, found, "agent")


async def _stream(ctx: Services, artifact: Artifact, to: str) -> StreamingResponse:
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
    return StreamingResponse(body(), media_type="application/octet-stream", headers=headers)
