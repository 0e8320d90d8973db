"""A cache node given several control planes on one database
(``--control-plane-events-url`` twice) moves on past one that refuses the connection, and
says which refused when it is the only one. The control plane inside ``hal server``
(``/cache/v1``) stands by with its server: its redirect names the leader's bare URL, and
the node keeps the ``/cache/v1`` of its address there."""

from __future__ import annotations

import asyncio
import socket

import pytest

from hal.cache.controlclient import (
    ControlPlaneClient,
    ControlPlaneDown,
    base_url_from_events_url,
)
from hal.testing.failover_peer import FailoverPeer


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_cache_node_moves_to_the_next_control_plane() -> None:
    leader = FailoverPeer()
    leader.gets["/instances/c1"] = {"id": "c1"}
    dead = dead_url()

    async def scenario() -> None:
        cp = ControlPlaneClient(f"{dead},{leader.url}", "c1")
        assert await cp.get_instance("c1") == {"id": "c1"}
        assert cp.planes.leader == leader.url
        await cp.close()
        alone = ControlPlaneClient(dead, "c1")
        with pytest.raises(ControlPlaneDown, match=f"{dead}: ConnectError"):
            await alone.get_instance("c1")
        await alone.close()

    try:
        asyncio.run(scenario())
    finally:
        leader.close()


def test_a_cache_node_follows_a_standby_server_to_the_leaders_cache_plane() -> None:
    leader = FailoverPeer()
    standby = FailoverPeer().standby(leader)
    leader.gets["/cache/v1/instances/c1"] = {"id": "c1"}

    async def scenario() -> None:
        cp = ControlPlaneClient(base_url_from_events_url(f"{standby.url}/cache/v1/events"), "c1")
        assert await cp.get_instance("c1") == {"id": "c1"}
        assert cp.planes.leader == f"{leader.url}/cache/v1"
        await cp.close()

    try:
        asyncio.run(scenario())
    finally:
        leader.close()
        standby.close()
