"""``PooledAgentChannel``: one ``AgentChannel`` for many nodes, on aiohttp.

``hal emulate`` presents thousands of nodes from one process; each holds a long poll
open and sends a flush beside it, so the process makes hundreds of requests a second.
Through httpx (``HttpAgentChannel``) about 85 % of the emulator's CPU goes to the client
(its request and response models, cookies, and httpcore's pool, which looks through its
connections for every request), and on a machine that the emulator shares with the
server that CPU is the server's. aiohttp parses HTTP in C (llhttp) and keeps its idle
connections in a queue per address, so one session serves every node.

The protocol is ``HttpAgentChannel``'s, request for request: both are a
``ServersChannel``, which makes the paths, bodies (pydantic's JSON), headers
(``User-Agent: hal-agent``, the bearer token), timeouts, the following of the leader
among several addresses (``hal.client.servers``' rounds) and the errors (``refusal``,
``unreachable``); this module sends the requests alone. One difference: httpx honours
``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY`` and ``~/.netrc`` (its ``trust_env``), and
this channel always connects to the servers directly (aiohttp's ``trust_env`` would look
the proxy and ``.netrc`` up on a thread for every request, the CPU this module saves).
The real agent keeps ``HttpAgentChannel`` (it needs streaming artifacts, routes and the
output relay, which this one does not offer).
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from hal.agent.channel import (
    CONNECT_TIMEOUT_SECONDS,
    JSON_CONTENT,
    ChannelUnavailable,
    SendFailed,
    ServersChannel,
)

# uvicorn closes a connection idle for 5 s: drop ours sooner, or a request may go out on
# one the server is closing (httpx's pool lets one idle 5 s)
KEEPALIVE_SECONDS = 4.0


class PooledAgentChannel(ServersChannel):
    """``ServersChannel`` on one aiohttp session. The session (and its pool) is made at
    the first request, on the running loop; ``aclose`` ends it, and a request after that
    is ``ChannelUnavailable``."""

    def __init__(self, server_url: str, token: str | None) -> None:
        super().__init__(server_url, token)
        self.headers.update(JSON_CONTENT)
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._closed:
            raise ChannelUnavailable("the channel is closed")
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=0,  # one connection per request in flight, as N agents hold
                    ssl=self.tls,
                    keepalive_timeout=KEEPALIVE_SECONDS,
                ),
                cookie_jar=aiohttp.DummyCookieJar(),  # (the server sets none)
            )
        return self._session

    async def _send(
        self, url: str, body: bytes, read_timeout: float
    ) -> tuple[int, Mapping[str, str], bytes]:
        timeout = aiohttp.ClientTimeout(
            total=None, connect=CONNECT_TIMEOUT_SECONDS, sock_read=read_timeout
        )
        try:
            async with self._http().post(
                url,
                data=body,
                headers=self.headers,
                timeout=timeout,
                allow_redirects=False,  # a standby's 307: the round follows it
            ) as response:
                return response.status, response.headers, await response.read()
        except (TimeoutError, aiohttp.ClientError) as err:
            # a connector's error (its SSL and certificate errors too) wraps the OSError
            # or ssl.SSLError that says why
            cause = err.os_error if isinstance(err, aiohttp.ClientConnectorError) else err
            raise SendFailed(err, cause) from err
