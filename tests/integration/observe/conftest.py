"""A live HAL with one agent for the observability integration tests, a webhook receiver,
and Debian's Prometheus scraping it (skipped with a reason when not installed)."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest_helpers import finished

from hal.testing import http
from hal.testing.live import LiveServer, free_port, stop_process, wait_until


class Receiver:
    """A local HTTP server that records the JSON bodies POSTed to it (webhooks)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="package")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(scope="package")
def live(tmp_path_factory: pytest.TempPathFactory, receiver: Receiver) -> Iterator[LiveServer]:
    """One server for the package: alerts fire fast and go to ``receiver``."""
    mp = pytest.MonkeyPatch()
    # read by ObserveConfig.from_env when the server is built
    mp.setenv("HAL_ALERT_WEBHOOKS", receiver.url)
    mp.setenv("HAL_ALERT_NODE_DOWN_S", "0")
    data = tmp_path_factory.mktemp("hal-observe")
    server = LiveServer(data, config_overrides={"node_timeout_seconds": 3.0,
                                                "heartbeat_interval_seconds": 1.0})  # fmt: skip
    try:
        server.start()
        mp.undo()
        with server.agents(1, cpus=2, memory="1G"):
            yield server
    finally:
        mp.undo()
        server.stop()


PROMETHEUS = shutil.which("prometheus")


@pytest.fixture(scope="package")
def prometheus(live: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's prometheus scraping ``live`` every second; yields its base URL."""
    if PROMETHEUS is None:
        pytest.skip("prometheus not installed (Debian package 'prometheus')")
    tmp = tmp_path_factory.mktemp("prometheus")
    target = live.url.removeprefix("http://")
    (tmp / "prom.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs: [{{job_name: hal, static_configs: [{{targets: ['{target}']}}]}}]\n"
    )
    port = free_port()
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp / 'prom.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:

        def target_up() -> bool:
            try:
                r = http.get(url + "/api/v1/targets", timeout=2).json()
            except (httpx.HTTPError, ValueError):
                return False
            return any(t["health"] == "up" for t in r["data"]["activeTargets"])

        wait_until(target_up, 30, 0.2, "prometheus to scrape HAL")
        yield url
    finally:
        stop_process(proc)
        log.close()


@pytest.fixture(scope="package")
def completed_job(live: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    """A job that printed its TRACEPARENT and ran to completion."""
    from hal.wire.jobs import JobSubmit

    work = tmp_path_factory.mktemp("work")
    with live.client() as c:
        done = c.submit(JobSubmit(script="#!/bin/sh\necho tp=$TRACEPARENT\necho oops >&2\n",
                                  workdir=str(work), name="tracejob"))  # fmt: skip
    wait_until(lambda: finished(live, done.job_id), 30, message="the job to finish")
    return done.job_id, work
