"""A site runs ``hal server`` two or three times on one PostgreSQL: one leads, the others
stand by and redirect (307 + ``X-HAL-Leader``) or, knowing no leader yet, answer 503 with
``X-HAL-Role: standby``. The SDK is given every address (``HAL_URL=a,b``) and must reach
the leader through dead addresses and standbys, send a redirected request again with the
same method, body and ``Idempotency-Key``, resume the event stream after its last event
at the next leader, and, when no leader appears in ``HAL_FAILOVER_TIMEOUT``, say what
each address answered. The peers here are small HTTP servers answering as the contract
(docs/admin/failover.md) says a leader and a standby do."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from hal.client import HalClient
from hal.client.config import ClientConfig, load_client_config, store_token
from hal.client.servers import LeaderChoice, failover_timeout, server_urls
from hal.core.errors import InvalidRequest, Unavailable
from hal.testing.failover_peer import FailoverPeer as Peer
from hal.wire.submit import JobSubmit

JOB = JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader file of this test's own (``~/.cache/hal/leader.json`` otherwise)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    made = [Peer(), Peer(), Peer()]
    yield made
    for peer in made:
        peer.close()


def dead_url() -> str:
    """An address nothing listens on (connection refused), as a server that died."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def client(*urls: str) -> HalClient:
    return HalClient(config=ClientConfig(url=",".join(urls), token="t", retry_seconds=0))


def test_a_dead_first_address_is_passed_and_the_leader_remembered(peers: list[Peer]) -> None:
    """The first server died (connection refused): the submission goes to the second,
    and the next client of this process goes there first."""
    dead, live = dead_url(), peers[0]
    with client(dead, live.url) as c:
        assert c.submit(JOB).job_id == 100
    assert LeaderChoice([dead, live.url]).order() == [live.url, dead]
    with client(dead, live.url) as c:
        assert c.whoami(validate=False).name == "alice"


def test_a_standby_redirects_and_the_write_lands_once_at_the_leader(peers: list[Peer]) -> None:
    """The standby answers 307 naming the leader: the same POST, body and
    Idempotency-Key go there; the standby never takes the write."""
    leader = peers[0]
    standby = peers[1].standby(leader)
    with client(standby.url, leader.url) as c:
        assert c.submit(JOB).job_id == 100
    (path, body, key), (_, leader_body, leader_key) = standby.posts[0], leader.posts[0]
    assert path == "/v1/jobs" and key and leader_key == key and leader_body == body
    assert standby.accepted == {} and len(leader.posts) == 1


def test_a_single_address_follows_its_standby_to_a_leader_not_listed(peers: list[Peer]) -> None:
    """HAL_URL names one server, a standby now: its redirect is followed to the leader's
    advertised URL, which the client was never given."""
    leader = peers[0]
    standby = peers[1].standby(leader)
    with client(standby.url) as c:
        assert c.submit(JOB).job_id == 100
    assert len(leader.accepted) == 1


def test_a_takeover_in_progress_is_waited_for(
    peers: list[Peer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both servers stand by and know no leader (503) until one takes over: the client
    keeps looking, within HAL_FAILOVER_TIMEOUT, and its submission lands once."""
    monkeypatch.setenv("HAL_FAILOVER_TIMEOUT", "20")
    a, b = peers[0].standby(), peers[1].standby()
    timer = threading.Timer(1.5, lambda: setattr(b, "role", "leader"))
    timer.start()
    with client(a.url, b.url) as c:
        assert c.submit(JOB).job_id == 100
    timer.join()
    assert a.accepted == {} and len(b.accepted) == 1 and len(a.posts) >= 2


def test_no_leader_in_time_names_each_address_and_its_answer(
    peers: list[Peer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HAL_FAILOVER_TIMEOUT", "1")
    dead, standby = dead_url(), peers[0].standby()
    with client(dead, standby.url) as c, pytest.raises(Unavailable) as info:
        c.submit(JOB)
    message = str(info.value)
    assert "no HAL server answered as the leader within 1 s (HAL_FAILOVER_TIMEOUT)" in message
    assert f"{dead}: " in message and "refused" in message.lower()
    assert f"{standby.url}: standby, no leader answering yet (503)" in message


def test_an_answer_lost_moves_a_keyed_submit_on_but_not_a_plain_post(peers: list[Peer]) -> None:
    """The leader died reading the request: a submission (its Idempotency-Key makes a
    resend safe) goes to the next server with its key; a cancel-like POST does not, and
    the caller is told it may have been carried out."""
    lost, leader = peers[0], peers[1]
    lost.role = "lost"
    with client(lost.url, leader.url) as c:
        assert c.submit(JOB).job_id == 100
        assert lost.posts[0][2] == leader.posts[0][2]
    lost_again = peers[2]
    lost_again.role = "lost"
    with client(lost_again.url, leader.url) as c, pytest.raises(Unavailable) as info:
        c.signal_step(7, 0, 10)
    assert "may have carried it out" in str(info.value)
    assert [p for p, _, _ in leader.posts] == ["/v1/jobs"]


def test_the_event_stream_resumes_at_the_new_leader_after_its_last_event(
    peers: list[Peer],
) -> None:
    """Two events into the stream the leader hands over and drops the connection: the
    client goes to the new leader and asks for what came after event 2."""
    old, new = peers[0], peers[1].standby()
    new.leader_url = ""
    old.stream_cut, old.successor = 2, new
    with client(old.url, new.url) as c:
        stream = c.events(0, follow=True)
        ids = [next(stream).id for _ in range(4)]
        del stream  # (its connection closes with it)
    assert ids == [1, 2, 3, 4]
    assert old.stream_afters == ["0"] and new.stream_afters[0] == "2"


def test_the_token_stored_for_any_listed_address_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hal login` stored the token under the second server's address: a client given
    both finds it; a login with the list stores it under each."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("HAL_TOKEN", raising=False)
    store_token("http://b:8470", "alice", "tok-b")
    assert load_client_config("http://a:8470, http://b:8470/").token == "tok-b"
    assert load_client_config("http://a:8470, http://b:8470/").url == "http://a:8470,http://b:8470"
    store_token("http://c:8470,http://d:8470", "bob", "tok-cd")
    assert load_client_config("http://d:8470").token == "tok-cd"


def test_address_lists_and_the_timeout_are_read_strictly(monkeypatch: pytest.MonkeyPatch) -> None:
    assert server_urls(" http://a:1/ ,, http://b:2,http://a:1") == ("http://a:1", "http://b:2")
    assert server_urls(["http://a:1", "http://b:2,http://c:3"]) == (
        "http://a:1",
        "http://b:2",
        "http://c:3",
    )
    monkeypatch.setenv("HAL_FAILOVER_TIMEOUT", "2.5")
    assert failover_timeout() == 2.5
    monkeypatch.setenv("HAL_FAILOVER_TIMEOUT", "soon")
    with pytest.raises(InvalidRequest, match="HAL_FAILOVER_TIMEOUT='soon'"):
        failover_timeout()
    with pytest.raises(InvalidRequest, match="'ftp://x' is not a HAL server URL"):
        client("http://a:1", "ftp://x")


def test_a_round_follows_a_redirect_once_per_target_and_stops_at_loops() -> None:
    """Two standbys naming each other (a stale leader URL): the round ends after the
    redirects it allows, each address and its answer kept for the error."""
    choice = LeaderChoice(["http://a:1", "http://b:2"])
    rnd = choice.round()
    seen = []
    while (url := rnd.next_url()) is not None:
        seen.append(url)
        other = "http://b:2" if url == "http://a:1" else "http://a:1"
        assert not rnd.answered(url, 307, {"x-hal-leader": other, "x-hal-role": "standby"})
    assert len(seen) <= 5 and choice.leader is None
    assert "http://a:1: standby, the leader is at http://b:2 (307)" in rnd.summary()


def test_the_next_command_goes_to_the_leader_first(peers: list[Peer], tmp_path: Path) -> None:
    """A command found the leader behind a standby: the next command (a new process,
    here a client with this process's memory cleared) reads it from the leader file and
    never asks the standby."""
    leader = peers[0]
    standby = peers[1].standby(leader)
    with client(standby.url, leader.url) as c:
        c.submit(JOB)
    saved = json.loads((tmp_path / "cache" / "hal" / "leader.json").read_text())
    assert saved == {f"{standby.url},{leader.url}": leader.url}
    LeaderChoice([standby.url, leader.url]).passed(leader.url)  # a new process knows none
    asked = len(standby.posts)
    with client(standby.url, leader.url) as c:
        c.submit(JOB)
    assert len(standby.posts) == asked and len(leader.accepted) == 2
