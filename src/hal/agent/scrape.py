"""``--feedback-metrics``: the agent scrapes a running job's own Prometheus endpoint and
reports what it finds as the job's feedback (docs/feedback.md).

The batch node's agent keeps one target per job that asked (``Launch.feedback_metrics``)
and reads it every ``INTERVAL_S`` (the first read ``FIRST_S`` after the launch), with a
``TIMEOUT_S`` limit and at most ``MAX_BODY`` bytes. The values go to the server as the
job would send them itself: ``POST /v1/jobs/{id}/feedback`` with the job's own
``HAL_FEEDBACK_TOKEN`` from its launch, to its ``HAL_URL`` (the agent's server where the
job has none). So the server checks, rate-limits and stores them as any report, and the
agent needs no other channel or key. An endpoint that is down, slow, or not Prometheus
text is skipped until the next read (logged once per change); a target ends with its job,
or when the server refuses its token (the run was requeued).
"""

from __future__ import annotations

import asyncio
import logging
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from hal.core.errors import HalError, Unauthenticated
from hal.wire.agent import Launch

log = logging.getLogger(__name__)

INTERVAL_S = 10.0  # between two reads of one job's endpoint
FIRST_S = 1.0  # the first read after the launch (the job may still be starting)
TIMEOUT_S = 2.0  # to connect, and to read the whole page
MAX_BODY = 1 << 20  # bytes of a page read; a longer one is not parsed
CHUNK = 64 * 1024


@dataclass(slots=True)
class Target:
    job_id: int
    attempt: int
    url: str
    names: tuple[str, ...]
    token: str
    server: str
    due: float  # monotonic
    failing: str = ""  # the last fault logged ("" = the last read went through)


class Scraper:
    """The targets of the jobs on this node, read by ``run`` while they live."""

    def __init__(
        self, server_url: str, live: Callable[[], set[int]], interval_s: float = INTERVAL_S
    ) -> None:
        self.server_url = server_url
        self.live = live
        self.interval_s = interval_s
        self.targets: dict[int, Target] = {}
        self.reports = 0  # reports the server took (tests, /metrics of the agent)

    def launched(self, launch: Launch) -> None:
        """Take the job's target from its launch (none: nothing, or the old one goes)."""
        self.targets.pop(launch.job_id, None)
        if not launch.feedback_metrics:
            return
        # hal.core.feedback for a job that asks to be scraped, not at the agent's start
        from hal.core.feedback import ENV_TOKEN, parse_scrape

        token = launch.environment.get(ENV_TOKEN, "")
        if not token:
            return
        try:
            target = parse_scrape(launch.feedback_metrics)
        except HalError as err:  # checked at submit; a server of another version?
            log.warning("job %s: not scraped: %s", launch.job_id, err)
            return
        self.targets[launch.job_id] = Target(
            launch.job_id,
            launch.attempt,
            target.url,
            target.names,
            token,
            launch.environment.get("HAL_URL") or self.server_url,
            time.monotonic() + FIRST_S,
        )

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            live = self.live()
            for job_id in [j for j in self.targets if j not in live]:
                del self.targets[job_id]
            now = time.monotonic()
            due = [t for t in self.targets.values() if t.due <= now]
            for t in due:
                t.due = now + self.interval_s
            if due:
                await asyncio.gather(*(asyncio.to_thread(self._once, t) for t in due))
            with_next = [t.due for t in self.targets.values()]
            wait = min([*with_next, time.monotonic() + 1.0]) - time.monotonic()
            try:
                async with asyncio.timeout(max(0.05, wait)):
                    await stop.wait()
            except TimeoutError:
                pass

    def _once(self, target: Target) -> None:
        """Read ``target`` once and report what it has (a worker thread)."""
        from hal.core.feedback import pick_scraped

        try:
            values = pick_scraped(read_page(target.url), target.names)
        except (OSError, ValueError, UnicodeDecodeError) as err:
            self._fault(target, f"{target.url} not read: {err}")
            return
        if not values:
            self._fault(target, f"{target.url} has none of the metrics to report")
            return
        from hal.client import HalClient

        try:
            with HalClient(target.server, token=target.token) as client:
                client.report_feedback(target.job_id, values)
        except Unauthenticated:
            log.info("job %s: its token is refused (a new run?): not scraped", target.job_id)
            if self.targets.get(target.job_id) is target:
                del self.targets[target.job_id]
            return
        except (HalError, OSError) as err:
            self._fault(target, f"report not taken: {err}")
            return
        self.reports += 1
        if target.failing:
            log.info("job %s: scraped again from %s", target.job_id, target.url)
        target.failing = ""

    @staticmethod
    def _fault(target: Target, why: str) -> None:
        if why != target.failing:
            log.warning("job %s: %s", target.job_id, why)
        target.failing = why


def read_page(url: str) -> str:
    """The page at ``url``: at most ``MAX_BODY`` bytes, read within ``TIMEOUT_S``; no proxy
    (the address is the node's own), no redirect elsewhere."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{url!r} is not an http(s) URL")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    request = urllib.request.Request(url, headers={"Accept": "text/plain"})  # noqa: S310 (http(s) only, checked above)
    deadline = time.monotonic() + TIMEOUT_S
    body = bytearray()
    with opener.open(request, timeout=TIMEOUT_S) as reply:
        while chunk := reply.read(min(CHUNK, MAX_BODY + 1 - len(body))):
            body += chunk
            if len(body) > MAX_BODY:
                raise ValueError(f"the page is longer than {MAX_BODY} bytes")
            if time.monotonic() > deadline:  # a page trickled out slowly
                raise TimeoutError(f"the page took more than {TIMEOUT_S:g} s")
    return body.decode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # a redirect is an error: the agent reads the job's address only
