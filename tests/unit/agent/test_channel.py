"""The HTTP transport of the agent channel, tested at httpx's transport seam; the
leader-following tests run ``hal emulate``'s ``PooledAgentChannel`` too."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path

import httpx
import pytest

from hal.agent.channel import (
    ChannelUnavailable,
    CredentialRefused,
    HttpAgentChannel,
    NodeForgotten,
)
from hal.agent.pooled_channel import PooledAgentChannel
from hal.host.certs import init_ca, issue
from hal.host.tls import server_context
from hal.testing.failover_peer import FailoverPeer
from hal.wire.agent import AgentInstructions, AgentRegister, AgentSync, JobReport


def channel(handler: object) -> HttpAgentChannel:
    return HttpAgentChannel(
        "http://hal:8470/",
        "s3cret",
        transport=httpx.MockTransport(handler),  # type: ignore[arg-type]
    )


def test_register_and_sync_speak_the_wire_models() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/agent/register":
            return httpx.Response(
                200,
                json={
                    "node": "n1",
                    "heartbeat_interval_seconds": 5,
                    "node_timeout_seconds": 30,
                    "kill_wait_seconds": 7,
                    "kill": [3],
                    "server_time": 1.0,
                },
            )
        body = json.loads(request.content)
        return httpx.Response(
            200,
            json=AgentInstructions(
                acked_seq=body["reports"][0]["seq"], server_time=2.0
            ).model_dump(),
        )

    async def scenario() -> None:
        ch = channel(handler)
        registered = await ch.register(AgentRegister(node="n1", cpus=2, memory_bytes=1))
        assert (registered.kill_wait_seconds, registered.kill) == (7, [3])
        report = JobReport(seq=41, job_id=1, attempt=0, kind="started", time=1.0, pid=9)
        reply = await ch.sync("n1", AgentSync(reports=[report], wait_seconds=3))
        assert reply.acked_seq == 41
        await ch.aclose()

    asyncio.run(scenario())
    assert [r.url.path for r in seen] == ["/v1/agent/register", "/v1/agent/n1/sync"]
    assert all(r.headers["Authorization"] == "Bearer s3cret" for r in seen)
    # the long poll may take wait_seconds: the read timeout allows for it
    assert seen[1].extensions["timeout"]["read"] >= 3 + 10


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
def test_http_errors_map_to_channel_errors(status: int, error: type[Exception]) -> None:
    async def scenario() -> None:
        ch = channel(lambda request: httpx.Response(status, text="nope"))
        with pytest.raises(error):
            await ch.sync("n1", AgentSync())
        await ch.aclose()

    asyncio.run(scenario())


def test_unreachable_server_is_unavailable_not_a_crash() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async def scenario() -> None:
        ch = channel(handler)
        with pytest.raises(ChannelUnavailable, match="ConnectError"):
            await ch.register(AgentRegister(node="n1", cpus=1, memory_bytes=1))
        await ch.aclose()

    asyncio.run(scenario())


def test_a_refused_token_carries_the_servers_reason() -> None:
    """The agent's one log line says why (problem+json ``detail``), not the raw body."""
    problem = {"type": "about:blank", "status": 403, "detail": "user alice is no agent"}

    async def scenario() -> None:
        ch = channel(lambda request: httpx.Response(403, json=problem))
        with pytest.raises(CredentialRefused) as refused:
            await ch.register(AgentRegister(node="n1", cpus=1, memory_bytes=1))
        assert (refused.value.status, str(refused.value)) == (
            403,
            "HTTP 403: user alice is no agent",
        )
        await ch.aclose()

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
