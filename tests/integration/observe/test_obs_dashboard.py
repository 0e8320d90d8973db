"""The dashboard in headless Chromium (Debian's ``chromium`` driven by Playwright):
nodes on the map, a submitted job in the queue, filters, job detail, and a 10,000-job
queue that still pages and filters. Screenshots go to ``$HAL_TEST_OUTPUT_DIR/dashboard``
(default: pytest's temporary directory)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hal.testing.live import LiveServer
from hal.wire.jobs import JobBatchSubmit, JobSubmit
from hal.wire.submit import to_json

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]  # fmt: skip
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists() and shutil.which("chromium") is None,
    reason="chromium not installed (Debian package 'chromium')",
)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = os.environ.get("HAL_TEST_OUTPUT_DIR")
    path = Path(base) / "dashboard" if base else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def hal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with LiveServer(tmp_path_factory.mktemp("hal-ui")) as server, server.agents(2, cpus=2):
        yield server


@pytest.fixture(scope="module")
def page(hal: LiveServer) -> Iterator[object]:
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1366, "height": 768})  # a laptop screen
            page.set_default_timeout(15_000)
            page.goto(f"{hal.url}/ui#token={hal.token}")
            yield page
        finally:
            browser.close()


def test_overview_shows_every_node_on_the_map(page, shots: Path) -> None:  # type: ignore[no-untyped-def]
    for node in ("node1", "node2"):
        page.wait_for_selector(f'[data-node="{node}"][data-state="idle"]')
    assert "CPUs in use" in page.inner_text("#cards")
    assert page.inner_text("#cluster-name") == "hal"
    page.screenshot(path=str(shots / "overview.png"), full_page=True)


def test_a_submitted_job_appears_in_the_queue_and_its_detail_opens(  # type: ignore[no-untyped-def]
    page, hal: LiveServer, tmp_path: Path, shots: Path
) -> None:
    with hal.client() as c:
        done = c.submit(JobSubmit(script="#!/bin/sh\necho hi\n", workdir=str(tmp_path),
                                  name="probe-job", hold=True))  # fmt: skip
    page.click('nav a[data-tab="queue"]')
    row = page.wait_for_selector(f'#queue-table tr[data-job="{done.job_id}"]')
    assert "JobHeldUser" in row.inner_text()  # why pending
    page.screenshot(path=str(shots / "queue.png"))
    row.click()
    page.wait_for_selector("#job-detail:not([hidden])")
    page.wait_for_function(
        "id => document.querySelector('#d-id').textContent === id", arg=str(done.job_id)
    )
    assert "trace" in page.inner_text("#d-trace")
    assert "submitted" in page.inner_text("#d-timeline")
    page.screenshot(path=str(shots / "job-detail.png"))
    page.click("#close-detail")


def test_filters_narrow_the_queue(page, hal: LiveServer) -> None:  # type: ignore[no-untyped-def]
    with hal.client() as c:
        for name in ("alpha-1", "alpha-2", "beta-1"):
            c.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", name=name, hold=True))
    page.click('nav a[data-tab="queue"]')
    page.fill("#f-text", "alpha")
    page.wait_for_function("document.querySelectorAll('#queue-table tbody tr').length === 2")
    names = page.eval_on_selector_all("#queue-table tbody tr td:nth-child(2)",
                                      "cells => cells.map(c => c.textContent)")  # fmt: skip
    assert sorted(names) == ["alpha-1", "alpha-2"]
    page.fill("#f-text", "")
    page.select_option("#f-state", "RUNNING")
    page.wait_for_function("document.querySelector('#page-info').textContent === 'no jobs'")
    page.select_option("#f-state", "")


def test_ten_thousand_queued_jobs_page_and_filter(  # type: ignore[no-untyped-def]
    page, hal: LiveServer, shots: Path
) -> None:
    """The browser holds one page at a time; paging and filtering still answer."""
    one = JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", hold=True, name="bulk")
    body = JobBatchSubmit(jobs=[one] * 1000).model_dump_json(exclude_defaults=True)
    headers = {"Authorization": f"Bearer {hal.token}", "Content-Type": "application/json"}
    with httpx.Client(base_url=hal.url, headers=headers, timeout=60) as http:
        for _ in range(10):
            http.post("/v1/jobs/batch", content=body).raise_for_status()
        special = JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", hold=True,
                            name="needle-in-queue")  # fmt: skip
        needle = http.post("/v1/jobs", content=to_json(special)).json()["job_id"]
    page.click('nav a[data-tab="queue"]')
    page.wait_for_function(
        "/of 100\\d\\d/.test(document.querySelector('#page-info').textContent)", timeout=30_000
    )
    assert page.eval_on_selector_all("#queue-table tbody tr", "rows => rows.length") == 100
    first = page.inner_text("#queue-table tbody tr:first-child td:first-child")
    page.click("#next")
    page.wait_for_function(
        "f => document.querySelector('#queue-table tbody tr td').textContent !== f", arg=first
    )
    assert page.inner_text("#page-info").startswith("101–200 of ")
    page.screenshot(path=str(shots / "queue-10k.png"))
    page.fill("#f-text", "needle")
    page.wait_for_selector(f'#queue-table tr[data-job="{needle}"]')
    assert page.eval_on_selector_all("#queue-table tbody tr", "rows => rows.length") == 1
    page.fill("#f-text", "")


def test_fair_share_and_predictions_say_not_available_yet(page) -> None:  # type: ignore[no-untyped-def]
    page.click('nav a[data-tab="fairshare"]')
    assert "Not available yet" in page.inner_text("#fairshare-na")
    page.click('nav a[data-tab="prediction"]')
    assert "Not available yet" in page.inner_text("#prediction-na")
    page.click('nav a[data-tab="alerts"]')
    page.wait_for_selector("#alerts-firing tbody tr")
