"""The agent's interruption-notice poller against the IMDS stand-in (a real HTTP server
made from EC2's documented shapes): IMDSv2 tokens, 404 until a notice, the notice once,
the rebalance path, and a metadata service that fails or answers nonsense."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from hal.agent.channel import AgentChannel
from hal.agent.config import AgentConfig
from hal.agent.interruption import (
    ACTION_PATH,
    TOKEN_HEADER,
    TOKEN_PATH,
    TTL_HEADER,
    NoticePoller,
    NoticeUnreadable,
    parse_action,
    parse_rebalance,
    parse_time,
)
from hal.agent.shell import AgentShell
from hal.testing import http
from hal.testing.imds import ImdsStandIn, ec2_time
from hal.testing.live import free_port
from hal.wire.agent import InterruptionNotice


@pytest.fixture
def imds() -> Iterator[ImdsStandIn]:
    with ImdsStandIn() as stand_in:
        yield stand_in


def polled(poller: NoticePoller, times: int = 1) -> list[InterruptionNotice]:
    found: list[InterruptionNotice] = []

    async def go() -> None:
        for _ in range(times):
            await poller.check(found.append)

    asyncio.run(go())
    return found


def test_the_stand_in_wants_an_imdsv2_token(imds: ImdsStandIn) -> None:
    """As EC2 with HttpTokens=required: no token (or a made-up one) is 401, a PUT without
    a TTL 400; with a token, 404 until a notice."""
    url = imds.url
    assert http.get(url + ACTION_PATH).status_code == 401
    assert http.get(url + ACTION_PATH, headers={TOKEN_HEADER: "made-up"}).status_code == 401
    assert http.put(url + TOKEN_PATH).status_code == 400
    assert http.put(url + TOKEN_PATH, headers={TTL_HEADER: "21601"}).status_code == 400
    token = http.put(url + TOKEN_PATH, headers={TTL_HEADER: "60"}).text
    assert http.get(url + ACTION_PATH, headers={TOKEN_HEADER: token}).status_code == 404
    when = imds.interrupt("terminate", 120)
    action = http.get(url + ACTION_PATH, headers={TOKEN_HEADER: token})
    assert action.json() == {"action": "terminate", "time": ec2_time(when)}
    assert 118 <= when - time.time() <= 121
    legacy = http.get(
        url + "/latest/meta-data/spot/termination-time", headers={TOKEN_HEADER: token}
    )
    assert legacy.text == ec2_time(when)


def test_no_notice_no_news(imds: ImdsStandIn) -> None:
    poller = NoticePoller(imds.url)
    assert polled(poller, 3) == []
    assert imds.requests == 6  # two paths a poll, one token for all


def test_an_interruption_is_handed_on_once(imds: ImdsStandIn) -> None:
    poller = NoticePoller(imds.url)
    assert polled(poller) == []
    when = imds.interrupt("stop", 120)
    found = polled(poller, 3)
    assert found == [InterruptionNotice(kind="interruption", action="stop", time=when)]


def test_a_rebalance_recommendation_and_an_interruption_both_come(imds: ImdsStandIn) -> None:
    poller = NoticePoller(imds.url)
    noticed = imds.rebalance()
    assert polled(poller) == [InterruptionNotice(kind="rebalance", time=noticed)]
    when = imds.interrupt()
    assert polled(poller, 2) == [
        InterruptionNotice(kind="interruption", action="terminate", time=when)
    ]


def test_a_new_token_after_the_service_forgot_the_old(imds: ImdsStandIn) -> None:
    """A 401 with a kept token (expired, or the service restarted): one new token."""
    poller = NoticePoller(imds.url)
    polled(poller)
    with imds._lock:
        imds._tokens.clear()
    when = imds.interrupt()
    assert [n.time for n in polled(poller)] == [when]


def test_an_unreachable_service_is_logged_once_and_polled_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    poller = NoticePoller(f"http://127.0.0.1:{port}")
    with caplog.at_level(logging.DEBUG, "hal.agent"):
        assert polled(poller, 2) == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cannot read" in warnings[0].getMessage()
    with ImdsStandIn(port=port) as late:  # it comes up: the next poll reads it
        when = late.interrupt()
        assert [n.time for n in polled(poller)] == [when]


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[]", b'{"time": "2026-01-01T00:00:00Z"}', b'{"action": "terminate"}'],
)
def test_an_instance_action_not_in_the_documented_shape_is_refused(body: bytes) -> None:
    with pytest.raises(NoticeUnreadable):
        parse_action(body)


def test_ec2_times_are_utc() -> None:
    assert parse_time("2017-09-18T08:22:00Z") == 1505722920.0
    with pytest.raises(NoticeUnreadable):
        parse_time("2017-09-18T08:22:00")  # no zone: not what EC2 writes
    with pytest.raises(NoticeUnreadable):
        parse_rebalance(b'{"noticeTime": 5}')


def test_the_agent_sends_one_notice_of_each_kind_until_a_sync_carried_it(
    tmp_path: Path,
) -> None:
    """Bounded: a newer notice of a kind replaces one not yet sent; one a sync carried
    is not sent again, one that came meanwhile is."""
    agent = AgentShell(AgentConfig(state_dir=tmp_path, token="t"), cast(AgentChannel, None))
    first = InterruptionNotice(kind="interruption", action="terminate", time=100.0)
    later = InterruptionNotice(kind="interruption", action="stop", time=110.0)
    risk = InterruptionNotice(kind="rebalance", time=90.0)
    for notice in (risk, first, later):
        agent._notice(notice)
    request, _ = agent._sync_request(0.0)
    assert request.notices == [risk, later]
    agent._notice(first)  # read again meanwhile, say from another poll
    agent._notices_sent(request)
    assert agent._sync_request(0.0)[0].notices == [first]
    agent._notices_sent(agent._sync_request(0.0)[0])
    assert agent._sync_request(0.0)[0].notices == []
