"""A user's ``HtcClient`` given several servers (``HAL_URL=a,b``) reaches the leader past
a dead address and a standby, as the SDK does (tests/unit/client/test_failover.py), and
says what each answered when none leads."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from hal.client.config import ClientConfig
from hal.core.errors import Unavailable
from hal.htc.client import HtcClient
from hal.testing.failover_peer import FailoverPeer


@pytest.fixture
def pair() -> Iterator[tuple[FailoverPeer, FailoverPeer]]:
    leader = FailoverPeer()
    standby = FailoverPeer().standby(leader)
    yield leader, standby
    leader.close()
    standby.close()


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_an_htc_client_lists_sessions_at_the_leader(
    pair: tuple[FailoverPeer, FailoverPeer], monkeypatch: pytest.MonkeyPatch
) -> None:
    leader, standby = pair
    leader.gets["/v1/htc/sessions"] = {"sessions": []}
    urls = f"{dead_url()},{standby.url}"  # the leader only through the standby's redirect
    with HtcClient(config=ClientConfig(url=urls, token="t")) as htc:
        assert htc.sessions() == []
    monkeypatch.setenv("HAL_FAILOVER_TIMEOUT", "0")
    standby.leader_url = ""
    dead = dead_url()
    with (
        HtcClient(config=ClientConfig(url=f"{dead},{standby.url}", token="t")) as htc,
        pytest.raises(Unavailable, match="no HAL server answered as the leader") as info,
    ):
        htc.sessions()
    assert f"{dead}: ConnectError" in str(info.value)
