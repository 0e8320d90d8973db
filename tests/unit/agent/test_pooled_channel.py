"""``hal emulate``'s ``PooledAgentChannel`` alone (what it shares with the agent's
channel, and its requests, are tested with that channel in test_channel.py)."""

from __future__ import annotations

import asyncio

import pytest

from hal.agent.channel import ChannelUnavailable
from hal.agent.pooled_channel import PooledAgentChannel
from hal.testing.failover_peer import FailoverPeer
from hal.wire.agent import AgentRegister


def test_a_closed_channel_sends_nothing_more() -> None:
    """A request after ``aclose`` (a node's task still running as the emulator stops)
    is ``ChannelUnavailable``, not a new session left open."""

    server = FailoverPeer()

    async def scenario() -> None:
        ch = PooledAgentChannel(server.url, "s3cret")
        try:
            await ch.register(AgentRegister(node="n1", cpus=1, memory_bytes=1))
            await ch.aclose()
            with pytest.raises(ChannelUnavailable, match="the channel is closed"):
                await ch.register(AgentRegister(node="n1", cpus=1, memory_bytes=1))
            assert ch._session is None
        finally:
            await ch.aclose()

    try:
        asyncio.run(scenario())
    finally:
        server.close()
    assert server.registered == ["n1"]
