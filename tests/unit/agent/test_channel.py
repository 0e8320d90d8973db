"""The agent channel: what every transport shares (``ServersChannel``: the answers'
meaning, the timeouts) with a scripted transport; each transport (the agent's httpx,
``hal emulate``'s aiohttp) against real servers on loopback, the same tests for both."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import pytest
from aiohttp import web

from hal.agent.channel import (
    REQUEST_TIMEOUT_SECONDS,
    SYNC_GRACE_SECONDS,
    ChannelUnavailable,
    CredentialRefused,
    HttpAgentChannel,
    NodeForgotten,
    SendFailed,
    ServersChannel,
)
from hal.agent.pooled_channel import PooledAgentChannel
from hal.host.certs import init_ca, issue
from hal.host.tls import server_context
from hal.testing.failover_peer import FailoverPeer
from hal.wire.agent import AgentInstructions, AgentRegister, AgentSync, JobReport

Answer = tuple[int, Mapping[str, str], bytes]


class Scripted(ServersChannel):
    """A transport that answers from a script (an exception: no answer came)."""

    def __init__(self, *answers: Answer | Exception) -> None:
        super().__init__("http://hal:8470/", "s3cret")
        self.answers = list(answers)
        self.sent: list[tuple[str, float]] = []

    async def aclose(self) -> None:
        pass

    async def _send(self, url: str, body: bytes, read_timeout: float) -> Answer:
        self.sent.append((url, read_timeout))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise SendFailed(answer)
        return answer


def problem(status: int) -> Answer:
    body = {"type": "about:blank", "status": status, "detail": "user alice is no agent"}
    return status, {"content-type": "application/problem+json"}, json.dumps(body).encode()


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (404, NodeForgotten),
        (401, CredentialRefused),
        (403, CredentialRefused),
        (500, ChannelUnavailable),
        (503, ChannelUnavailable),
    ],
)
def test_the_leaders_refusals_map_to_channel_errors(status: int, error: type[Exception]) -> None:
    """A refused token carries the server's reason (problem+json ``detail``) for the
    agent's one log line, not the raw body."""

    async def scenario() -> None:
        with pytest.raises(error) as raised:
            await Scripted(problem(status)).sync("n1", AgentSync())
        if isinstance(raised.value, CredentialRefused):
            assert (raised.value.status, str(raised.value)) == (
                status,
                f"HTTP {status}: user alice is no agent",
            )

    asyncio.run(scenario())


def test_a_server_that_gives_no_answer_is_unavailable_not_a_crash() -> None:
    async def scenario() -> None:
        ch = Scripted(ConnectionRefusedError("refused"))
        with pytest.raises(ChannelUnavailable) as raised:
            await ch.register(AgentRegister(node="n1", cpus=1, memory_bytes=1))
        assert str(raised.value) == (
            "cannot reach http://hal:8470/v1/agent/register: ConnectionRefusedError: refused"
        )

    asyncio.run(scenario())


REGISTERED = {
    "node": "n1",
    "heartbeat_interval_seconds": 5,
    "node_timeout_seconds": 30,
    "kill_wait_seconds": 7,
    "kill": [3],
    "server_time": 1.0,
}


def test_a_long_poll_may_take_its_wait_and_the_grace() -> None:
    synced = AgentInstructions(acked_seq=0, server_time=2.0).model_dump_json()

    async def scenario() -> Scripted:
        ch = Scripted((200, {}, json.dumps(REGISTERED).encode()), (200, {}, synced.encode()))
        await ch.register(AgentRegister(node="n1", cpus=1, memory_bytes=1))
        await ch.sync("n1", AgentSync(wait_seconds=3))
        return ch

    assert asyncio.run(scenario()).sent == [
        ("http://hal:8470/v1/agent/register", REQUEST_TIMEOUT_SECONDS),
        ("http://hal:8470/v1/agent/n1/sync", 3 + SYNC_GRACE_SECONDS),
    ]


Handler = Callable[[web.Request], Awaitable[web.Response]]


async def serving(handler: Handler) -> tuple[web.AppRunner, str]:
    """A plain-HTTP server on loopback answering every POST with ``handler``."""
    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


CHANNELS = [HttpAgentChannel, PooledAgentChannel]


@pytest.mark.parametrize("make", CHANNELS)
def test_register_and_sync_speak_the_wire_models_with_the_agents_headers(
    make: type[HttpAgentChannel | PooledAgentChannel],
) -> None:
    seen: list[tuple[str, dict[str, str], bytes]] = []

    async def handler(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append((request.path, dict(request.headers), body))
        if request.path == "/v1/agent/register":
            return web.json_response(REGISTERED)
        acked = json.loads(body)["reports"][0]["seq"]
        return web.json_response(
            AgentInstructions(acked_seq=acked, server_time=2.0).model_dump(mode="json")
        )

    sync = AgentSync(
        reports=[JobReport(seq=41, job_id=1, attempt=0, kind="started", time=1.0, pid=9)],
        wait_seconds=3,
    )

    async def scenario() -> None:
        runner, url = await serving(handler)
        ch = make(url, "s3cret")
        try:
            registered = await ch.register(AgentRegister(node="n1", cpus=2, memory_bytes=1))
            assert (registered.kill_wait_seconds, registered.kill) == (7, [3])
            assert (await ch.sync("n1", sync)).acked_seq == 41
        finally:
            await ch.aclose()
            await runner.cleanup()

    asyncio.run(scenario())
    assert [path for path, _, _ in seen] == ["/v1/agent/register", "/v1/agent/n1/sync"]
    assert seen[1][2] == sync.model_dump_json().encode()
    for _, headers, _ in seen:
        assert headers["Authorization"] == "Bearer s3cret"
        assert headers["User-Agent"] == "hal-agent"
        assert headers["Content-Type"] == "application/json"


@pytest.mark.parametrize("make", CHANNELS)
@pytest.mark.parametrize("server", ["nothing listening", "plain HTTP, reached by https://"])
def test_a_server_that_cannot_answer_is_unavailable_and_says_why(
    make: type[HttpAgentChannel | PooledAgentChannel], server: str
) -> None:
    """No address that answers, or an https:// address pointing at a plain-HTTP server
    (a failed handshake, which each transport wraps its own way): the error both
    transports give names the address and why, and the node's loop goes on."""

    async def handler(request: web.Request) -> web.Response:
        return web.json_response({})

    async def scenario() -> None:
        runner, url = await serving(handler)
        if server == "nothing listening":
            await runner.cleanup()
            why = ""
        else:
            url = url.replace("http://", "https://")
            why = f"{url} does not speak TLS there: use http:// for it, or start it with TLS"
        ch = make(url, "s3cret")
        try:
            with pytest.raises(ChannelUnavailable) as raised:
                await ch.register(AgentRegister(node="n1", cpus=1, memory_bytes=1))
            assert str(raised.value).startswith(f"cannot reach {url}/v1/agent/register: {why}")
        finally:
            await ch.aclose()
            await runner.cleanup()

    asyncio.run(scenario())


CHANNELS = [HttpAgentChannel, PooledAgentChannel]


@pytest.mark.parametrize("make", CHANNELS)
def test_an_agent_given_several_servers_registers_with_the_leader(
    make: type[HttpAgentChannel | PooledAgentChannel],
) -> None:
    """`hal agent --server DEAD --server STANDBY --server LEADER`: the registration goes
    past the dead address and the standby's redirect to the leader; with the leader gone
    too, the error names each address and what it answered."""
    leader = FailoverPeer()
    standby = FailoverPeer().standby(leader)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"

    async def scenario() -> None:
        ch = make(f"{dead},{standby.url},{leader.url}", "s3cret")
        registered = await ch.register(AgentRegister(node="n1", cpus=2, memory_bytes=1))
        assert registered.node == "n1" and ch.servers.leader == leader.url
        standby.leader_url = ""
        leader.role = "lost"
        with pytest.raises(ChannelUnavailable) as info:
            await ch.register(AgentRegister(node="n1", cpus=2, memory_bytes=1))
        message = str(info.value)
        assert f"{standby.url}: standby, no leader answering yet (503)" in message
        assert f"{dead}: " in message and f"{leader.url}: " in message
        await ch.aclose()

    try:
        asyncio.run(scenario())
    finally:
        leader.close()
        standby.close()
    assert leader.registered == ["n1"] and standby.registered == []


@pytest.mark.parametrize("make", CHANNELS)
def test_an_agent_given_http_verifies_an_https_leader_with_the_site_ca(
    make: type[HttpAgentChannel | PooledAgentChannel],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`hal agent --server http://STANDBY` whose standby redirects to a leader serving
    https with the site CA's certificate: the registration reaches the leader when
    HAL_CA_FILE names that CA, and is refused (the certificate checked, not waved
    through) when it does not."""
    init_ca(tmp_path)
    cert, key = issue(tmp_path, "localhost", ips=["127.0.0.1"])
    leader = FailoverPeer(tls=server_context(str(cert), str(key)))
    standby = FailoverPeer().standby(leader)

    async def register() -> HttpAgentChannel | PooledAgentChannel:
        ch = make(standby.url, "s3cret")
        try:
            await ch.register(AgentRegister(node="n1", cpus=2, memory_bytes=1))
        finally:
            await ch.aclose()
        return ch

    try:
        monkeypatch.setenv("HAL_CA_FILE", str(tmp_path / "ca.pem"))
        assert asyncio.run(register()).servers.leader == leader.url
        monkeypatch.delenv("HAL_CA_FILE")
        with pytest.raises(ChannelUnavailable, match="not signed by a CA this client trusts"):
            asyncio.run(register())
    finally:
        leader.close()
        standby.close()
    assert leader.registered == ["n1"]
