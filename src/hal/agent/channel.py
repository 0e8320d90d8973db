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

A channel given several server addresses (``hal agent --server A --server B``) sends each
request to the leader among them by ``hal.client.servers``' rules: past a dead address or
a standby, after a standby's redirect; a request no address takes as leader is
``ChannelUnavailable`` naming each, and the shell's backoff tries again (the next round
starts at the leader last seen). Sending a sync or a registration again is safe: reports
carry their sequence numbers until acknowledged, and a registration replaces the last.

``OutputChannel`` is the optional second long poll of the job-output relay (ADR 0007):
a channel that has it lets the control plane read job output on this node; the shell
runs the relay only for such channels.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

import httpx

from hal.agent.artifacts import ArtifactMissing
from hal.client.servers import LeaderChoice, Round, not_leading, server_urls
from hal.host.tls import explain, verify_for_servers
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
JSON_CONTENT = {"Content-Type": "application/json"}


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


class SendFailed(Exception):
    """A transport's request that got no answer (refused, reset, timed out, a failed
    handshake): ``error`` as the transport raised it, ``cause`` the ``OSError`` or
    ``ssl.SSLError`` under it, which ``hal.host.tls.explain`` reads."""

    def __init__(self, error: BaseException, cause: BaseException | None = None) -> None:
        super().__init__(f"{error.__class__.__name__}: {error}")
        self.cause = error if cause is None else cause


class ServersChannel(ABC):
    """What every transport of ``AgentChannel`` shares: the servers (``server_url``: one
    address, or several, comma-separated, of which the leader is found and followed), the
    TLS settings, the headers, ``register``, ``sync`` and the round of addresses each
    request goes through (the module's doc). A transport implements ``_send`` alone."""

    def __init__(self, server_url: str, token: str | None) -> None:
        self.headers = {"User-Agent": "hal-agent"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.servers = LeaderChoice(server_urls(server_url) or (server_url,))
        self.server_url = ",".join(self.servers.urls)
        # HAL_CA_FILE, HAL_TLS_CERT (mutual TLS) where any is https: one site's servers
        # share their CA
        self.tls = verify_for_servers(self.servers.urls)

    async def register(self, request: AgentRegister) -> AgentRegistered:
        body = await self._post("/v1/agent/register", request.model_dump_json(), None)
        return AgentRegistered.model_validate_json(body)

    async def sync(self, node: str, request: AgentSync) -> AgentInstructions:
        timeout = request.wait_seconds + SYNC_GRACE_SECONDS
        body = await self._post(f"/v1/agent/{node}/sync", request.model_dump_json(), timeout)
        return AgentInstructions.model_validate_json(body)

    @abstractmethod
    async def aclose(self) -> None: ...

    @abstractmethod
    async def _send(
        self, url: str, body: bytes, read_timeout: float
    ) -> tuple[int, Mapping[str, str], bytes]:
        """POST the JSON ``body`` to ``url`` with ``self.headers``, not following
        redirects (the round does); the answer's status, headers (their names in lower
        case, or a mapping that ignores their case) and body. ``SendFailed`` when no
        answer came."""

    async def _post(self, path: str, content: str, read_timeout: float | None) -> bytes:
        data = content.encode()
        rnd = self.servers.round()
        while (server := rnd.next_url()) is not None:
            try:
                status, headers, body = await self._send(
                    server + path, data, read_timeout or REQUEST_TIMEOUT_SECONDS
                )
            except SendFailed as failed:
                rnd.failed(server, explain(failed.cause, server) or str(failed))
                continue
            if not rnd.answered(server, status, headers):
                continue
            if status >= 400:
                raise refusal(path, status, body.decode(errors="replace"))
            return body
        raise unreachable(path, rnd)


class HttpAgentChannel(ServersChannel):
    """The agent's channel, on httpx (``ServersChannel``'s doc), with the artifacts, the
    artifact routes and the output relay."""

    def __init__(
        self,
        server_url: str,
        token: str | None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(server_url, token)
        self._http = httpx.AsyncClient(
            headers=self.headers,
            timeout=httpx.Timeout(REQUEST_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS),
            transport=transport,
            verify=self.tls,
        )

    async def output(self, node: str, request: OutputPoll) -> OutputReads:
        timeout = request.wait_seconds + SYNC_GRACE_SECONDS
        body = await self._post(f"/v1/agent/{node}/output", request.model_dump_json(), timeout)
        return OutputReads.model_validate_json(body)

    async def artifact(self, sha256: str, write: Callable[[bytes], object]) -> None:
        """``ArtifactChannel``: the content a job pinned, streamed to ``write``, from the
        leader the syncs found (a standby's answer is ``ChannelUnavailable``: the fetch
        is tried again, by then at the leader)."""
        path = f"/v1/agent/artifacts/{sha256}"
        server = self.servers.current
        timeout = httpx.Timeout(ARTIFACT_READ_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
        try:
            async with self._http.stream("GET", server + path, timeout=timeout) as response:
                if not_leading(response.status_code, response.headers):
                    await response.aread()
                    self.servers.passed(server)
                    raise ChannelUnavailable(f"{server}{path}: a standby: {_detail(response)}")
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
            self.servers.passed(server)
            raise ChannelUnavailable(
                f"cannot read {server}{path}: {err.__class__.__name__}: {err}"
            ) from err

    async def artifact_route(self, sha256: str, node: str) -> ArtifactRoute:
        """``TreeChannel``: how ``node`` gets the content (through its leaf cache, or
        from here). The server writes the content into the tree's root first, so the
        answer may take as long as reading it from the database."""
        path = f"/v1/agent/artifacts/{sha256}/route"
        server = self.servers.current
        timeout = httpx.Timeout(ROUTE_TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS)
        try:
            response = await self._http.get(server + path, params={"node": node}, timeout=timeout)
        except httpx.HTTPError as err:
            self.servers.passed(server)
            raise ChannelUnavailable(
                f"cannot read {server}{path}: {err.__class__.__name__}: {err}"
            ) from err
        if not_leading(response.status_code, response.headers):
            self.servers.passed(server)
            raise ChannelUnavailable(f"{server}{path}: a standby: {_detail(response)}")
        if response.status_code == 404:
            raise ArtifactMissing(f"the server has no such artifact: {_detail(response)}")
        if response.status_code in (401, 403):
            raise CredentialRefused(response.status_code, _detail(response))
        if response.status_code >= 400:
            raise ChannelUnavailable(f"{path}: HTTP {response.status_code}: {_detail(response)}")
        return ArtifactRoute.model_validate_json(response.content)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(
        self, url: str, body: bytes, read_timeout: float
    ) -> tuple[int, Mapping[str, str], bytes]:
        timeout = httpx.Timeout(read_timeout, connect=CONNECT_TIMEOUT_SECONDS)
        try:
            response = await self._http.post(
                url, content=body, headers=JSON_CONTENT, timeout=timeout
            )
        except httpx.HTTPError as err:
            raise SendFailed(err) from err
        return response.status_code, response.headers, response.content


def refusal(path: str, status: int, text: str) -> AgentChannelError:
    """What the leader's answer ``status`` (≥ 400, body ``text``) to ``path`` means to an
    agent (the module's doc): one rule for every transport."""
    if status == 404:
        return NodeForgotten(f"{path}: the server does not know this node")
    if status in (401, 403):
        return CredentialRefused(status, detail_of(text))
    return ChannelUnavailable(f"{path}: HTTP {status}: {text[:300]}")


def unreachable(path: str, rnd: Round) -> ChannelUnavailable:
    """A ``rnd`` in which no address answered as the leader."""
    if len(rnd.tried) == 1:  # one server: retried as any unreachable one, and logged so
        server, why = rnd.tried[0]
        return ChannelUnavailable(f"cannot reach {server}{path}: {why}")
    return ChannelUnavailable(f"{path}: {rnd.summary()}")


def detail_of(text: str) -> str:
    """The server's reason (problem+json ``detail``), else the start of the body."""
    try:
        detail = json.loads(text).get("detail")
    except (ValueError, AttributeError):
        detail = None
    return detail if isinstance(detail, str) and detail else text[:300]


def _detail(response: httpx.Response) -> str:
    return detail_of(response.text)
