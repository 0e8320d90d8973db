"""Every answer of a PostgreSQL server names the database's live servers
(``X-HAL-Servers``). A client given one address learns the others from it: they are tried
after the addresses given (which stay first, in their order), a server's list replaces
the last one learned, the path of the address that answered is kept, and the SDK keeps
them in its leader file so that the next command, given the same one address, reaches
another server when that one died. The peers here are small HTTP servers answering as
the failover contract says (``hal.testing.failover_peer``)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.agent.channel import HttpAgentChannel
from hal.agent.pooled_channel import PooledAgentChannel
from hal.client import HalClient
from hal.client import servers as servers_module
from hal.client.config import ClientConfig
from hal.client.servers import LeaderCache, LeaderChoice, learned_urls
from hal.core.errors import Unavailable
from hal.testing.failover_peer import FailoverPeer as Peer
from hal.wire.agent import AgentRegister
from hal.wire.submit import JobSubmit

JOB = JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader file of this test's own, and this process's memory of leaders and
    learned servers cleared before and after (as for a new process)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(servers_module, "_LEADERS", {})
    monkeypatch.setattr(servers_module, "_LEARNED", {})


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    made = [Peer(), Peer()]
    yield made
    for peer in made:
        peer.close()


def new_process() -> None:
    """What a new command knows: nothing but the leader file."""
    servers_module._LEADERS.clear()
    servers_module._LEARNED.clear()


def client(*urls: str) -> HalClient:
    return HalClient(config=ClientConfig(url=",".join(urls), token="t", retry_seconds=0))


def free_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_the_addresses_given_stay_first_and_the_learned_follow_in_their_order() -> None:
    choice = LeaderChoice(["http://b:2", "http://a:1"])
    assert choice.learn(["http://a:1", "http://c:3", "http://b:2", "http://d:4", "http://c:3"])
    assert choice.learned == ("http://c:3", "http://d:4")
    assert choice.order() == ["http://b:2", "http://a:1", "http://c:3", "http://d:4"]
    choice.lead("http://d:4")  # a learned server that answered as the leader: first
    assert choice.order() == ["http://d:4", "http://b:2", "http://a:1", "http://c:3"]
    assert not choice.learn(["http://c:3", "http://d:4"])  # the same: no change
    # a later list replaces the last: a server gone from it is no longer tried
    assert choice.learn(["http://a:1", "http://e:5"])
    assert choice.order() == ["http://d:4", "http://b:2", "http://a:1", "http://e:5"]
    assert choice.learn(["http://b:2"])
    assert not choice.learned


def test_a_header_is_read_strictly_and_keeps_the_answering_address_path() -> None:
    named = " http://a:1/, ftp://x:2 ,https://b:3,, javascript:alert(1)"
    assert learned_urls(named) == ("http://a:1", "https://b:3")
    assert learned_urls("http://a:1,http://b:2", "/cache/v1") == (
        "http://a:1/cache/v1",
        "http://b:2/cache/v1",
    )
    many = ",".join(f"http://h{i}:1" for i in range(40))
    assert len(learned_urls(many)) == servers_module.MAX_LEARNED


def test_a_round_tries_the_servers_a_standby_names_after_the_rest() -> None:
    """Given one address, a standby that knows no leader yet (503) names two servers:
    the round goes on to them, each once, and not back to the standby."""
    choice = LeaderChoice(["http://a:1"])
    rnd = choice.round()
    assert rnd.next_url() == "http://a:1"
    headers = {"x-hal-role": "standby", "x-hal-servers": "http://b:2,http://a:1,http://c:3"}
    assert not rnd.answered("http://a:1", 503, headers)
    seen = []
    while (url := rnd.next_url()) is not None:
        seen.append(url)
        assert not rnd.answered(url, 503, headers)  # (the same list again: nothing new)
    assert seen == ["http://b:2", "http://c:3"]


def test_a_learned_list_survives_in_the_leader_file_beside_the_leader() -> None:
    choice = LeaderChoice(["http://a:1"])
    cache = LeaderCache(choice)
    choice.learn(["http://a:1", "http://b:2"])
    choice.lead("http://a:1")
    cache.save()
    new_process()
    again = LeaderChoice(["http://a:1"])
    LeaderCache(again)
    assert again.learned == ("http://b:2",) and again.leader == "http://a:1"
    # another list's entries are its own
    assert LeaderChoice(["http://a:1", "http://z:9"]).learned == ()


def test_one_address_learns_the_other_server_and_the_next_command_reaches_it(
    peers: list[Peer], tmp_path: Path
) -> None:
    """The client is given the first server only; its answers name both. The first dies
    (nothing listens there any more): the next command, a new process, reaches the
    second through the leader file."""
    first, second = peers
    first.servers = second.servers = f"{first.url},{second.url}"
    with client(first.url) as c:
        c.submit(JOB)
    saved = json.loads((tmp_path / "cache" / "hal" / "leader.json").read_text())
    assert saved["learned"] == {first.url: [second.url]}
    first.close()
    new_process()
    with client(first.url) as c:
        c.submit(JOB)
    assert len(first.accepted) == 1 and len(second.accepted) == 1


def test_a_lone_server_costs_one_address_nothing_and_a_dead_one_fails_as_before(
    peers: list[Peer], tmp_path: Path
) -> None:
    """A server that names only itself, or nothing (SQLite), writes no leader file; a
    dead address with nothing learned fails at once as a lone server's always did."""
    lone = peers[0]
    lone.servers = lone.url
    with client(lone.url) as c:
        c.submit(JOB)
    assert not (tmp_path / "cache" / "hal" / "leader.json").exists()
    assert servers_module._LEARNED == {}
    with client(free_url()) as c, pytest.raises(Unavailable, match="cannot"):
        c.submit(JOB)


def test_a_standby_given_alone_is_followed_to_the_leader_and_both_are_learned(
    peers: list[Peer],
) -> None:
    leader, standby = peers
    standby.standby(leader)
    leader.servers = standby.servers = f"{leader.url},{standby.url}"
    with client(standby.url) as c:
        c.submit(JOB)
    assert LeaderChoice([standby.url]).learned == (leader.url,)
    assert LeaderChoice([standby.url]).leader == leader.url
    assert len(leader.accepted) == 1


@pytest.mark.parametrize("make", [HttpAgentChannel, PooledAgentChannel])
def test_an_agent_given_one_address_registers_with_the_server_it_learned(
    make: type[HttpAgentChannel | PooledAgentChannel], peers: list[Peer]
) -> None:
    """An agent's channel (and ``hal emulate``'s) learns from its answers as the SDK
    does: given the first server alone, it registers with the second once the first is
    gone."""
    first, second = peers
    first.servers = second.servers = f"{first.url},{second.url}"

    async def scenario() -> None:
        ch = make(first.url, "s3cret")
        await ch.register(AgentRegister(node="n1", cpus=1, memory_bytes=1))
        assert ch.servers.learned == (second.url,)
        first.role = "lost"  # (it drops the kept-alive connection, as a killed one does)
        first.close()
        again = await ch.register(AgentRegister(node="n1", cpus=1, memory_bytes=1))
        assert again.node == "n1" and ch.servers.leader == second.url
        await ch.aclose()

    asyncio.run(scenario())
    assert (first.registered, second.registered) == (["n1"], ["n1"])
