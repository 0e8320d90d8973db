"""``AgentChannel``: the agent's only way to the control plane, and its HTTP transport.

The shell talks to a channel, never to httpx, so the shell and the state machine are
tested with an in-process fake and the transport is tested alone::

    AgentChannelError
     ├── ChannelUnavailable   the server cannot be reached or answered 5xx (or another
     │                        4xx): retry with backoff (an agent never dies because its
     │                        server does)
     ├── CredentialRefused    the server refused the agent's token (401/403): no retry
     │                        can fix that; the agent says so and exits
     └── NodeForgotten        the server does not know this node (404): register again

``OutputChannel`` is the optional second long poll of the job-output relay (ADR 0007):
a channel that has it lets the control plane read job output on this node; the shell
runs the relay only for such channels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import httpx

from hal.agent.artifacts import ArtifactMissing
from hal.host.tls import explain, verify_for
from hal.wire.agent import AgentInstructions, AgentRegister, AgentRegistered, AgentSync
from hal.wire.artifacts import ArtifactRoute
from hal.wire.output import OutputPoll, OutputReads

# The server holds a sync up to ``wait_seconds``; allow that much plus this for the reply.
SYNC_GRACE_SECONDS = 10.0
CONNECT_TIMEOUT_SECONDS = 5.0
REQUEST_TIMEOUT_SECONDS = 15.0
ARTIFACT_READ_TIMEOUT_SECONDS = 60.0  # between two pieces of an artifact's content
# a route through the cache tree: the server may write the whole content into the root first
ROUTE_TIMEOUT_SECONDS = 300.0


class AgentChannelError(Exception):
    pass


class ChannelUnavailable(AgentChannelError):
    pass


class NodeForgotten(AgentChannelError):
    pass


class CredentialRefused(AgentChannelError):
    """The control plane answered 401 (a token it does not know) or 403 (a token that
    is no agent's, or bound to other nodes); ``detail`` is its reason."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class AgentChannel(Protocol):
    async def register(self, request: AgentRegister) -> AgentRegistered:
        """``POST /v1/agent/register``."""
        ...

    async def sync(self, node: str, request: AgentSync) -> AgentInstructions:
        """``POST /v1/agent/{node}/sync``: deliver reports, wait for instructions."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class OutputChannel(Protocol):
    async def output(self, node: str, request: OutputPoll) -> OutputReads:
        """``POST /v1/agent/{node}/output``: hand in answers to earlier reads, wait for
        new ones (ADR 0007)."""
        ...


class HttpAgentChannel:
    def __init__(
        self,
        server_url: str,
        token: str | None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"User-Agent": "hal-agent"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.server_url = server_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.server_url,
            headers=headers,
            timeout=httpx.Timeout(REQUEST_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS),
            transport=transport,
            verify=verify_for(self.server_url),  # HAL_CA_FILE, HAL_TLS_CERT (mutual TLS)
        )

    async def register(self, request: AgentRegister) -> AgentRegistered:
        body = await self._post("/v1/agent/register", request.model_dump_json(), None)
        return AgentRegistered.model_validate_json(body)

    async def sync(self, node: str, request: AgentSync) -> AgentInstructions:
        timeout = request.wait_seconds + SYNC_GRACE_SECONDS
        body = await self._post(f"/v1/agent/{node}/sync", request.model_dump_json(), timeout)
        return AgentInstructions.model_validate_json(body)

    async def output(self, node: str, request: OutputPoll) -> OutputReads:
        timeout = request.wait_seconds + SYNC_GRACE_SECONDS
        body = await self._post(f"/v1/agent/{node}/output", request.model_dump_json(), timeout)
        return OutputReads.model_validate_json(body)

    async def artifact(self, sha256: str, write: Callable[[bytes], object]) -> None:
        """``ArtifactChannel``: the content a job pinned, streamed to ``write``."""
        path = f"/v1/agent/artifacts/{sha256}"
        timeout = httpx.Timeout(ARTIFACT_READ_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
        try:
            async with self._http.stream("GET", path, timeout=timeout) as response:
                if response.status_code == 404:
                    await response.aread()
                    raise ArtifactMissing(f"the server has no such artifact: {_detail(response)}")
                if response.status_code in (401, 403):
                    await response.aread()
                    raise CredentialRefused(response.status_code, _detail(response))
                if response.status_code >= 400:
                    await response.aread()
                    raise ChannelUnavailable(f"{path}: HTTP {response.status_code}")
                async for data in response.aiter_bytes():
                    write(data)
        except httpx.HTTPError as err:
            raise ChannelUnavailable(
                f"cannot read {self.server_url}{path}: {err.__class__.__name__}: {err}"
            ) from err

    async def artifact_route(self, sha256: str, node: str) -> ArtifactRoute:
        """``TreeChannel``: how ``node`` gets the content (through its leaf cache, or
        from here). The server writes the content into the tree's root first, so the
        answer may take as long as reading it from the database."""
        path = f"/v1/agent/artifacts/{sha256}/route"
        timeout = httpx.Timeout(ROUTE_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
        try:
            response = await self._http.get(path, params={"node": node}, timeout=timeout)
        except httpx.HTTPError as err:
            raise ChannelUnavailable(
                f"cannot read {self.server_url}{path}: {err.__class__.__name__}: {err}"
            ) from err
        if response.status_code == 404:
            raise ArtifactMissing(f"the server has no such artifact: {_detail(response)}")
        if response.status_code in (401, 403):
            raise CredentialRefused(response.status_code, _detail(response))
        if response.status_code >= 400:
            raise ChannelUnavailable(f"{path}: HTTP {response.status_code}: {_detail(response)}")
        return ArtifactRoute.model_validate_json(response.content)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _post(self, path: str, content: str, read_timeout: float | None) -> bytes:
        timeout = httpx.Timeout(
            read_timeout or REQUEST_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS
        )
        try:
            response = await self._http.post(
                path,
                content=content,
                headers={"Content-Type": "application/json"},
                timeout=timeout,
            )
        except httpx.HTTPError as err:
            refused = explain(err, self.server_url)
            if refused is not None:  # retried as any unreachable server, and logged so
                raise ChannelUnavailable(f"{self.server_url}{path}: {refused}") from err
            raise ChannelUnavailable(
                f"cannot reach {self.server_url}{path}: {err.__class__.__name__}: {err}"
            ) from err
        if response.status_code == 404:
            raise NodeForgotten(f"{path}: the server does not know this node")
        if response.status_code in (401, 403):
            raise CredentialRefused(response.status_code, _detail(response))
        if response.status_code >= 400:
            raise ChannelUnavailable(f"{path}: HTTP {response.status_code}: {response.text[:300]}")
        return response.content


def _detail(response: httpx.Response) -> str:
    """The server's reason (problem+json ``detail``), else the start of the body."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return detail if isinstance(detail, str) and detail else response.text[:300]
