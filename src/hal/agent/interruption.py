"""``NoticePoller``: whether the provider is about to take this node's machine back, read
from the instance metadata service as EC2 documents it, for the long poll
(``AgentSync.notices``).

With ``hal agent --interruption-notice=URL`` (the metadata service's base, on EC2
``http://169.254.169.254``; off by default, on in EC2 spot groups' default user data)
the agent reads, every ``--interruption-interval`` seconds (default 5, as AWS advises):

1. an IMDSv2 session token: ``PUT /latest/api/token`` with
   ``X-aws-ec2-metadata-token-ttl-seconds`` (kept until shortly before it expires, and
   taken again after a 401);
2. ``GET /latest/meta-data/spot/instance-action`` with ``X-aws-ec2-metadata-token``:
   404 while nothing is planned; once the instance is marked,
   ``{"action": "terminate"|"stop"|"hibernate", "time": "2017-09-18T08:22:00Z"}`` (UTC,
   about two minutes ahead);
3. ``GET /latest/meta-data/events/recommendations/rebalance``: 404, or
   ``{"noticeTime": "..."}`` once EC2 judges the instance at raised risk.

Each notice found is handed to ``on_notice`` once (by its kind and time); the shell
sends it with its syncs until one is answered. A metadata service that cannot be read
(refused, timed out, a body that is not the documented shape) is logged once, then at
debug level, and the poller tries again at its next turn: it never stops the agent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from datetime import datetime

import httpx

from hal.host.tls import verify_for
from hal.wire.agent import InterruptionNotice

log = logging.getLogger("hal.agent")

INTERVAL_S = 5.0  # AgentConfig.interruption_interval_seconds' default (AWS: every 5 s)
TOKEN_PATH = "/latest/api/token"
ACTION_PATH = "/latest/meta-data/spot/instance-action"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
TOKEN_TTL_S = 21600  # the most IMDSv2 gives
TIMEOUT_S = 2.0  # the metadata service is on the host's link: it answers at once or not


class NoticeUnreadable(Exception):
    """The metadata service did not answer, or not in the documented shape."""


def parse_time(text: object) -> float:
    """EC2's UTC timestamp (``2017-09-18T08:22:00Z``) as Unix time."""
    if not isinstance(text, str):
        raise NoticeUnreadable(f"a time that is not text: {text!r}")
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise NoticeUnreadable(f"a time that is not ISO 8601: {text!r}") from None
    if stamp.tzinfo is None:
        raise NoticeUnreadable(f"a time without its zone: {text!r}")
    return stamp.timestamp()


def parse_action(body: bytes) -> InterruptionNotice:
    """``spot/instance-action``'s document."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise NoticeUnreadable(f"instance-action is not JSON: {body[:100]!r}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("action"), str):
        raise NoticeUnreadable(f"instance-action has no action: {body[:100]!r}")
    action = str(doc["action"])[:32]
    return InterruptionNotice(kind="interruption", action=action, time=parse_time(doc.get("time")))


def parse_rebalance(body: bytes) -> InterruptionNotice:
    """``events/recommendations/rebalance``'s document."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise NoticeUnreadable(f"rebalance is not JSON: {body[:100]!r}") from None
    if not isinstance(doc, dict):
        raise NoticeUnreadable(f"rebalance is not an object: {body[:100]!r}")
    return InterruptionNotice(kind="rebalance", time=parse_time(doc.get("noticeTime")))


class NoticePoller:
    def __init__(
        self,
        base_url: str,
        interval_s: float = INTERVAL_S,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.interval_s = interval_s
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=TIMEOUT_S,
            transport=transport,
            verify=verify_for(self.base_url),  # (plain HTTP: no CA bundle loaded)
        )
        self._token = ""
        self._token_until = 0.0  # monotonic
        self._seen: set[tuple[str, float]] = set()  # (kind, time) handed on
        self._failing = False

    async def run(self, on_notice: Callable[[InterruptionNotice], None]) -> None:
        """Poll every ``interval_s`` until cancelled, handing each new notice on once."""
        try:
            while True:
                await self.check(on_notice)
                await asyncio.sleep(self.interval_s)
        finally:
            await self._http.aclose()

    async def check(self, on_notice: Callable[[InterruptionNotice], None]) -> None:
        """One poll: each notice not handed on before goes to ``on_notice``."""
        try:
            notices = await self.read()
        except NoticeUnreadable as err:
            level = logging.DEBUG if self._failing else logging.WARNING
            log.log(level, "interruption notices: cannot read %s (%s)", self.base_url, err)
            self._failing = True
            return
        if self._failing:
            log.info("interruption notices: %s answers again", self.base_url)
            self._failing = False
        for notice in notices:
            key = (notice.kind, notice.time)
            if key not in self._seen:
                self._seen.add(key)
                log.warning(
                    "the provider says: %s%s at %s",
                    notice.kind,
                    f" ({notice.action})" if notice.action else "",
                    time.strftime("%H:%M:%S UTC", time.gmtime(notice.time)),
                )
                on_notice(notice)

    async def read(self) -> list[InterruptionNotice]:
        """The notices the metadata service gives now (``[]``: none)."""
        found = []
        action = await self._get(ACTION_PATH)
        if action is not None:
            found.append(parse_action(action))
        rebalance = await self._get(REBALANCE_PATH)
        if rebalance is not None:
            found.append(parse_rebalance(rebalance))
        return found

    async def _get(self, path: str) -> bytes | None:
        """The document at ``path``; None for 404 (nothing there)."""
        for fresh in (False, True):
            token = await self._session_token(fresh)
            response = await self._request("GET", path, {TOKEN_HEADER: token})
            if response.status_code == 401 and not fresh:
                continue  # the token expired or the service restarted: one new token
            if response.status_code == 404:
                return None
            if response.status_code != 200:
                raise NoticeUnreadable(f"GET {path}: HTTP {response.status_code}")
            return response.content
        raise NoticeUnreadable(f"GET {path}: HTTP 401 with a new token")

    async def _session_token(self, fresh: bool) -> str:
        if fresh or not self._token or time.monotonic() >= self._token_until:
            response = await self._request("PUT", TOKEN_PATH, {TTL_HEADER: str(TOKEN_TTL_S)})
            if response.status_code != 200 or not response.text.strip():
                raise NoticeUnreadable(f"PUT {TOKEN_PATH}: HTTP {response.status_code}")
            self._token = response.text.strip()
            self._token_until = time.monotonic() + TOKEN_TTL_S - 60
        return self._token

    async def _request(self, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
        try:
            return await self._http.request(method, path, headers=headers)
        except httpx.HTTPError as err:
            raise NoticeUnreadable(f"{method} {path}: {type(err).__name__}: {err}") from err
