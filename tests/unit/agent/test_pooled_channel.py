"""``hal emulate``'s ``PooledAgentChannel`` sends what ``HttpAgentChannel`` sends and
maps the answers as it does, against a real HTTP server on loopback (its leader-following
is tested with the agent's channel in test_channel.py and test_learned_servers.py)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web

from hal.agent.channel import ChannelUnavailable, CredentialRefused, NodeForgotten
from hal.agent.pooled_channel import PooledAgentChannel
from hal.wire.agent import AgentInstructions, AgentRegister, AgentSync, JobReport

Handler = Callable[[web.Request], Awaitable[web.Response]]


async def serving(handler: Handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


def test_register_and_sync_speak_the_wire_models_with_the_agents_headers() -> None:
    seen: list[tuple[str, dict[str, str], bytes]] = []

    async def handler(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append((request.path, dict(request.headers), body))
        if request.path == "/v1/agent/register":
            return web.json_response(
                {
                    "node": "n1",
                    "heartbeat_interval_seconds": 5,
                    "node_timeout_seconds": 30,
                    "kill_wait_seconds": 7,
                    "kill": [3],
                    "server_time": 1.0,
                }
            )
        acked = json.loads(body)["reports"][0]["seq"]
        return web.json_response(
            AgentInstructions(acked_seq=acked, server_time=2.0).model_dump(mode="json")
        )

    async def scenario() -> None:
        runner, url = await serving(handler)
        ch = PooledAgentChannel(url, "s3cret")
        try:
            registered = await ch.register(AgentRegister(node="n1", cpus=2, memory_bytes=1))
            assert (registered.kill_wait_seconds, registered.kill) == (7, [3])
            report = JobReport(seq=41, job_id=1, attempt=0, kind="started", time=1.0, pid=9)
            request = AgentSync(reports=[report], wait_seconds=3)
            reply = await ch.sync("n1", request)
            assert reply.acked_seq == 41
            assert seen[1][2] == request.model_dump_json().encode()
        finally:
            await ch.aclose()
            await runner.cleanup()

    asyncio.run(scenario())
    assert [path for path, _, _ in seen] == ["/v1/agent/register", "/v1/agent/n1/sync"]
    for _, headers, _ in seen:
        assert headers["Authorization"] == "Bearer s3cret"
        assert headers["User-Agent"] == "hal-agent"
        assert headers["Content-Type"] == "application/json"


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
    async def handler(request: web.Request) -> web.Response:
        problem = {"status": status, "detail": "user alice is no agent"}
        return web.json_response(problem, status=status)

    async def scenario() -> None:
        runner, url = await serving(handler)
        ch = PooledAgentChannel(url, "s3cret")
        try:
            with pytest.raises(error) as raised:
                await ch.sync("n1", AgentSync())
            if isinstance(raised.value, CredentialRefused):  # the server's reason
                assert str(raised.value) == f"HTTP {status}: user alice is no agent"
        finally:
            await ch.aclose()
            await runner.cleanup()

    asyncio.run(scenario())


def test_an_unreachable_server_is_unavailable_not_a_crash() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"

    async def scenario() -> None:
        ch = PooledAgentChannel(dead, "s3cret")
        try:
            with pytest.raises(ChannelUnavailable, match=f"cannot reach {dead}"):
                await ch.register(AgentRegister(node="n1", cpus=1, memory_bytes=1))
        finally:
            await ch.aclose()

    asyncio.run(scenario())
