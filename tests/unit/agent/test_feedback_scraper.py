"""The agent's reads of a job's Prometheus endpoint (``hal.agent.scrape``) against a real
HTTP server: bounded in size and time, no redirect followed, and a target kept only for a
launch that asked, with the job's token, and only while its job lives on the node."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hal.agent import scrape
from hal.agent.scrape import Scraper, read_page
from hal.core.feedback import ENV_TOKEN
from hal.wire.agent import Launch

RELEASE = threading.Event()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/slow":  # no answer until the test is over
            RELEASE.wait(60)
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "http://192.0.2.1/metrics")
            self.end_headers()
            return
        body = b"x 1\n" * (scrape.MAX_BODY // 4 + 1) if self.path == "/big" else b"up 1\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def base() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        RELEASE.set()
        httpd.shutdown()
        httpd.server_close()


def test_a_page_is_read(base: str) -> None:
    assert read_page(base + "/metrics") == "up 1\n"


def test_a_page_too_long_is_refused(base: str) -> None:
    with pytest.raises(ValueError, match="longer than"):
        read_page(base + "/big")


def test_a_slow_endpoint_times_out(base: str) -> None:
    """The endpoint never answers: the read ends with a timeout, not a hang (the bound
    is loose, as a loaded machine schedules the test's thread late)."""
    RELEASE.clear()
    started = time.monotonic()
    with pytest.raises(OSError, match="timed out"):
        read_page(base + "/slow")
    assert time.monotonic() - started < 30


def test_a_redirect_is_not_followed(base: str) -> None:
    with pytest.raises(OSError, match="302"):
        read_page(base + "/moved")


def test_an_endpoint_down_is_an_error_not_a_hang() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(OSError):
        read_page(f"http://127.0.0.1:{port}/metrics")


def launch(job_id: int, metrics: str, env: dict[str, str]) -> Launch:
    return Launch(
        job_id=job_id, attempt=0, name="j", user="u", script="true", workdir="/tmp",
        environment=env, stdout="", stderr=None, time_limit_seconds=0, memory_bytes=0,
        cpus=1, nodes=["n1"], node_index=0, feedback_metrics=metrics,
    )  # fmt: skip


def test_targets_follow_the_launches_and_the_live_jobs(base: str) -> None:
    live = {1, 2, 3}
    scraper = Scraper("http://127.0.0.1:1", lambda: live, interval_s=0.1)
    url = "http://localhost:9/metrics#up"
    scraper.launched(launch(1, url, {ENV_TOKEN: "t1", "HAL_URL": "http://srv:8470"}))
    scraper.launched(launch(2, "", {ENV_TOKEN: "t2"}))  # asked for nothing
    scraper.launched(launch(3, url, {}))  # no token: nothing to report with
    assert list(scraper.targets) == [1]
    target = scraper.targets[1]
    assert (target.url, target.names, target.token, target.server) == (
        "http://localhost:9/metrics",
        ("up",),
        "t1",
        "http://srv:8470",
    )

    async def run_until_gone() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(scraper.run(stop))
        live.discard(1)  # the job ended on the node
        async with asyncio.timeout(5):
            while scraper.targets:
                await asyncio.sleep(0.01)
        stop.set()
        await task

    asyncio.run(run_until_gone())
    assert scraper.reports == 0


def test_an_endpoint_down_is_retried_and_reports_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scraper = Scraper("http://127.0.0.1:1", lambda: {1}, interval_s=0.05)
    scraper.launched(launch(1, f"http://127.0.0.1:{port}/metrics", {ENV_TOKEN: "t"}))
    target = scraper.targets[1]
    target.due = 0.0

    async def three_reads() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(scraper.run(stop))
        async with asyncio.timeout(5):
            while target.due < time.monotonic() + 0.01 or not target.failing:
                await asyncio.sleep(0.01)
            first = target.due
            while target.due < first + 0.1:  # two more reads, still down
                await asyncio.sleep(0.01)
        stop.set()
        await task

    with caplog.at_level("WARNING", logger="hal.agent.scrape"):
        asyncio.run(three_reads())
    assert "not read" in target.failing
    assert scraper.targets == {1: target}  # kept: it may come up
    assert scraper.reports == 0
    assert len([r for r in caplog.records if "not read" in r.getMessage()]) == 1  # once
