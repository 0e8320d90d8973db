"""``PooledAgentChannel``: one ``AgentChannel`` for many nodes, on aiohttp.

``hal emulate`` presents thousands of nodes from one process; each holds a long poll
open and sends a flush beside it, so the process makes hundreds of requests a second.
Through httpx (``HttpAgentChannel``) about 85 % of the emulator's CPU went to the client
(its request and response models, cookies, and httpcore's pool, which looks through its
connections for every request), and on a machine that the emulator shares with the
server that CPU is the server's. aiohttp parses HTTP in C (llhttp) and keeps its idle
connections in a queue per address, so one session serves every node.

The protocol is ``HttpAgentChannel``'s, request for request: the same paths, bodies
(pydantic's JSON), headers (``User-Agent: hal-agent``, the bearer token), timeouts, the
same following of the leader among several addresses (``hal.client.servers``' rounds)
and the same errors (``refusal``, ``unreachable``): the server cannot tell the two
apart. The real agent keeps ``HttpAgentChannel`` (it needs streaming artifacts, routes
and the output relay, which this one does not offer).
"""

from __future__ import annotations

import aiohttp

from hal.agent.channel import (
    CONNECT_TIMEOUT_SECONDS,
    REQUEST_TIMEOUT_SECONDS,
    SYNC_GRACE_SECONDS,
    refusal,
    unreachable,
)
from hal.client.servers import LeaderChoice, server_urls
from hal.host.tls import explain, verify_for
from hal.wire.agent import AgentInstructions, AgentRegister, AgentRegistered, AgentSync

# uvicorn closes a connection idle for 5 s: drop ours sooner, or a request may go out on
# one the server is closing (httpx's pool lets one idle 5 s)
KEEPALIVE_SECONDS = 4.0


class PooledAgentChannel:
    """``server_url``: one address, or several (comma-separated) of which the leader is
    found and followed. The session (and its pool) is made at the first request, on the
    running loop; ``aclose`` ends it."""

    def __init__(self, server_url: str, token: str | None) -> None:
        self.headers = {"User-Agent": "hal-agent", "Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.servers = LeaderChoice(server_urls(server_url) or (server_url,))
        self.server_url = ",".join(self.servers.urls)
        # HAL_CA_FILE, HAL_TLS_CERT (mutual TLS) where any is https
        self._tls = verify_for(max(self.servers.urls, key=lambda url: url.startswith("https:")))
        self._session: aiohttp.ClientSession | None = None

    async def register(self, request: AgentRegister) -> AgentRegistered:
        body = await self._post("/v1/agent/register", request.model_dump_json(), None)
        return AgentRegistered.model_validate_json(body)

    async def sync(self, node: str, request: AgentSync) -> AgentInstructions:
        timeout = request.wait_seconds + SYNC_GRACE_SECONDS
        body = await self._post(f"/v1/agent/{node}/sync", request.model_dump_json(), timeout)
        return AgentInstructions.model_validate_json(body)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=0,  # one connection per request in flight, as N agents hold
                    ssl=self._tls,
                    keepalive_timeout=KEEPALIVE_SECONDS,
                ),
                cookie_jar=aiohttp.DummyCookieJar(),  # (the server sets none)
            )
        return self._session

    async def _post(self, path: str, content: str, read_timeout: float | None) -> bytes:
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=CONNECT_TIMEOUT_SECONDS,
            sock_read=read_timeout or REQUEST_TIMEOUT_SECONDS,
        )
        data = content.encode()
        http = self._http()
        rnd = self.servers.round()
        while (server := rnd.next_url()) is not None:
            try:
                async with http.post(
                    server + path,
                    data=data,
                    headers=self.headers,
                    timeout=timeout,
                    allow_redirects=False,  # a standby's 307: the round follows it
                ) as response:
                    status, headers = response.status, response.headers
                    body = await response.read()
            except (TimeoutError, aiohttp.ClientError) as err:
                # (aiohttp's certificate error is an SSLError without ssl's fields)
                cause: BaseException = err
                if isinstance(err, aiohttp.ClientConnectorCertificateError):
                    cause = err.certificate_error
                refused = explain(cause, server)
                rnd.failed(server, refused or f"{err.__class__.__name__}: {err}")
                continue
            if not rnd.answered(server, status, headers):
                continue
            if status >= 400:
                raise refusal(path, status, body.decode(errors="replace"))
            return body
        raise unreachable(path, rnd)
