"""The dashboard in headless Chromium (Debian's ``chromium`` driven by Playwright):
nodes on the map, a submitted job in the queue, filters, job detail, a 10,000-job queue
that still pages and filters, fair share and limits, prediction quality, and the data
tab with and without a ``[data]`` table. Screenshots go to
``$HAL_TEST_OUTPUT_DIR/dashboard`` (default: pytest's temporary directory).

The server starts with a day of accounting history in its store (three users' jobs that
ran far shorter than they asked for), the way a cluster that has been up a while does:
the predictor trains its model from it and fair share charges it, so those tabs show
the server's own numbers, not placeholders."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest_helpers import ARGS, BROWSER_MARKS, CHROMIUM

from hal.client import HalClient
from hal.config.priority import priority_from_dict
from hal.testing import http
from hal.testing.live import LiveServer, stop_process, wait_until
from hal.wire.jobs import JobBatchSubmit, JobSubmit
from hal.wire.submit import to_json

sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
pytestmark = BROWSER_MARKS


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = os.environ.get("HAL_TEST_OUTPUT_DIR")
    path = Path(base) / "dashboard" if base else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


# hal.toml's [priority], [[accounts]], [[users]] and [[qos]]: multifactor priority with
# fair share, and one QoS with a limit (its jobs run one per user)
POLICY = priority_from_dict(
    {
        "priority": {"weight_age": 1000, "weight_fairshare": 10000, "weight_qos": 1000},
        "accounts": [
            {"name": "physics", "fairshare": 3},
            {"name": "lattice", "parent": "physics", "grp_tres": {"cpus": 64}},
            {"name": "chemistry", "fairshare": 1},
        ],
        "users": [
            {"name": "alice", "default_account": "lattice"},
            {"name": "bob", "default_account": "chemistry"},
            {"name": "carol", "default_account": "chemistry"},
            {"name": "admin", "default_account": "physics"},
        ],
        "qos": [{"name": "normal"}, {"name": "small", "priority": 10, "max_jobs_per_user": 1}],
    }
)
# (user, job name, time limit s, run time s) of the accounting history
KINDS = (
    ("alice", "sim", 3600, 100.0),
    ("bob", "train", 7200, 1000.0),
    ("carol", "post", 600, 10.0),
)
HISTORY = 300  # past the learned predictor's first model (200 finished jobs)


def seed_history(db_url: str) -> None:
    """``HISTORY`` finished jobs of yesterday in the accounting, as if the cluster had
    run them (the store the server then opens)."""
    from hal.core.job import Allocation, Job, JobSpec
    from hal.core.resources import ResourceVector
    from hal.core.states import JobState
    from hal.state.store import SqlStateStore

    store = SqlStateStore(db_url)
    try:
        store.migrate()
        day_ago = time.time() - 86_400
        with store.transaction() as tx:
            first = tx.reserve_job_ids(HISTORY)
            tx.insert_scripts([(first, "#!/bin/sh\ntrue\n")])
            jobs = []
            one_cpu = Allocation(nodes=("node1",), per_node=(ResourceVector(cpus=1),))
            for i in range(HISTORY):
                user, name, limit, run = KINDS[i % len(KINDS)]
                start = day_ago + 60.0 * i
                end = start + run * (0.9 + 0.02 * ((i * 7) % 10))
                jobs.append(
                    Job(id=first + i, spec=JobSpec(user=user, script="", name=name, workdir="/tmp"),
                        partition="debug", state=JobState.COMPLETED, submit_time=start - 5,
                        start_time=start, end_time=end, time_limit_s=limit,
                        allocation=one_cpu)  # charged to fair share: 1 CPU-second a second
                )  # fmt: skip
            tx.insert_jobs(jobs, [first] * HISTORY)
    finally:
        store.close()


@pytest.fixture(scope="module")
def hal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    from hal.server.control_plane import sqlite_url

    data = tmp_path_factory.mktemp("hal-ui")
    seed_history(sqlite_url(data))
    with LiveServer(data, config_overrides={"priority": POLICY}) as server:
        with server.client() as admin:
            wait_until(lambda: not admin.predict_status().replaying, 60,
                       message="the predictor to replay the history")  # fmt: skip
        with server.agents(2, cpus=2):
            yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


def open_dashboard(browser: object, server: LiveServer) -> object:
    # a laptop screen
    page = browser.new_page(viewport={"width": 1366, "height": 768})  # type: ignore[attr-defined]
    page.set_default_timeout(15_000)
    page.goto(f"{server.url}/ui#token={server.token}")
    return page


@pytest.fixture(scope="module")
def page(browser: object, hal: LiveServer) -> Iterator[object]:
    opened = open_dashboard(browser, hal)
    yield opened
    opened.close()  # type: ignore[attr-defined]


def test_overview_shows_every_node_on_the_map(page, shots: Path) -> None:  # type: ignore[no-untyped-def]
    for node in ("node1", "node2"):
        page.wait_for_selector(f'[data-node="{node}"][data-state="idle"]')
    assert "CPUs in use" in page.inner_text("#cards")
    assert page.inner_text("#cluster-name") == "hal"
    page.screenshot(path=str(shots / "overview.png"), full_page=True)


def test_the_servers_url_opens_the_dashboard_and_its_login_says_where_the_token_is(  # type: ignore[no-untyped-def]
    browser, hal: LiveServer, shots: Path
) -> None:
    """The server's URL answered a JSON 404, and the dashboard without a token showed a
    bare token box. Now / leads to /ui, whose login says where the token is."""
    page = browser.new_page(viewport={"width": 1366, "height": 768})  # (its own storage)
    try:
        page.goto(hal.url + "/")
        assert page.url == hal.url + "/ui"
        page.wait_for_selector("#login:not([hidden])")
        text = page.inner_text("#login")
        assert "Open the link hal up printed" in text and "/ui#token=" in text
        assert "~/.config/hal/credentials.json" in text and "hal user token NAME" in text
        page.screenshot(path=str(shots / "login.png"))
    finally:
        page.close()


def test_the_utilisation_chart_has_axes_and_the_last_pass_its_time_and_age(  # type: ignore[no-untyped-def]
    page, hal: LiveServer, shots: Path
) -> None:
    """The chart was three lines without axes or times, and the card read "Last cycle
    151 cycles". Now the chart has a percentage axis and clock times, and the card the
    last pass's duration and how long ago it ran."""
    with hal.client() as c:  # a pass starts it
        c.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", name="one-pass"))
    page.click('nav a[data-tab="overview"]')
    page.wait_for_selector("#util-chart text.tick")
    axis = page.eval_on_selector_all("#util-chart text.axis:not(.tick)",
                                     "els => els.map(e => e.textContent)")  # fmt: skip
    assert axis == ["0%", "25%", "50%", "75%", "100%"]
    ticks = page.eval_on_selector_all("#util-chart text.tick",
                                      "els => els.map(e => e.textContent)")  # fmt: skip
    assert ticks and all(re.search(r"\d{1,2}:\d{2}", t) for t in ticks), ticks
    page.wait_for_function(
        "() => /ago$/.test(document.querySelector('[data-card=\"Last pass\"] span').textContent)"
    )
    card = page.inner_text('[data-card="Last pass"]')
    assert re.fullmatch(r"[\d.]+ (ms|s)\nLast pass \d+ s ago", card), card
    page.screenshot(path=str(shots / "overview-axes.png"), full_page=True)


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


def test_a_pending_jobs_detail_shows_the_memory_it_asks_for(  # type: ignore[no-untyped-def]
    page, hal: LiveServer
) -> None:
    """A held job asking 2 CPUs and 1 GiB: its detail shows what it asks for, as its CPUs
    do (the memory read 0 B until the job had an allocation)."""
    with hal.client() as c:
        job_id = c.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", hold=True,
                                    name="asks-memory", cpus_per_task=2,
                                    memory_per_node_bytes=1024**3)).job_id  # fmt: skip
        try:
            page.click('nav a[data-tab="queue"]')
            page.click(f'#queue-table tr[data-job="{job_id}"]')
            page.wait_for_function(
                "id => document.querySelector('#d-id').textContent === id", arg=str(job_id)
            )
            fields = page.inner_text("#d-fields")
            assert "CPUs / GPUs\n2 / 0" in fields
            assert "Memory\n1.0 GiB" in fields, fields
        finally:
            page.click("#close-detail")
            c.cancel(str(job_id))


def test_filters_narrow_the_queue(page, hal: LiveServer) -> None:  # type: ignore[no-untyped-def]
    with hal.client() as c:
        for name in ("alpha-1", "alpha-2", "beta-1"):
            c.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", name=name, hold=True))
    page.click('nav a[data-tab="queue"]')
    page.fill("#f-text", "alpha")
    # (two rows may show before the filter has been applied: wait for its rows)
    page.wait_for_function(
        "[...document.querySelectorAll('#queue-table tbody tr td:nth-child(2)')]"
        ".map(c => c.textContent).sort().join() === 'alpha-1,alpha-2'",
        timeout=15000,
    )
    names = page.eval_on_selector_all("#queue-table tbody tr td:nth-child(2)",
                                      "cells => cells.map(c => c.textContent)")  # fmt: skip
    assert sorted(names) == ["alpha-1", "alpha-2"]
    page.fill("#f-text", "")
    page.select_option("#f-state", "RUNNING")
    page.wait_for_function("document.querySelector('#page-info').textContent === 'no jobs'")
    page.select_option("#f-state", "")


def test_a_page_past_the_end_of_a_shrunk_queue_shows_the_last_page(  # type: ignore[no-untyped-def]
    page, hal: LiveServer, shots: Path
) -> None:
    """On page 2 of 150 jobs, 120 of them are cancelled: the open page is past the end of
    the 30 left, and the page turns back to show them (it showed "101–30 of 30" and no
    rows)."""
    with hal.client() as c:
        array = c.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", hold=True,
                                   name="pager-job", array="0-149")).job_id  # fmt: skip
        try:
            page.click('nav a[data-tab="queue"]')
            page.fill("#f-text", "pager-job")
            page.wait_for_function(
                "document.querySelector('#page-info').textContent === '1–100 of 150'"
            )
            page.click("#next")
            page.wait_for_function(
                "document.querySelector('#page-info').textContent === '101–150 of 150'"
            )
            c.cancel(f"{array}_[0-119]")
            page.wait_for_function(
                "document.querySelector('#page-info').textContent === '1–30 of 30'"
            )
            assert page.eval_on_selector_all("#queue-table tbody tr", "rows => rows.length") == 30
            assert page.is_disabled("#prev") and page.is_disabled("#next")
            page.screenshot(path=str(shots / "queue-shrunk.png"))
        finally:
            c.cancel(str(array))
            page.fill("#f-text", "")


def test_ten_thousand_queued_jobs_page_and_filter(  # type: ignore[no-untyped-def]
    page, hal: LiveServer, shots: Path
) -> None:
    """The browser holds one page at a time; paging and filtering still answer."""
    one = JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", hold=True, name="bulk")
    body = JobBatchSubmit(jobs=[one] * 1000).model_dump_json(exclude_defaults=True)
    headers = {"Authorization": f"Bearer {hal.token}", "Content-Type": "application/json"}
    with httpx.Client(base_url=hal.url, headers=headers, timeout=60) as session:
        for _ in range(10):
            session.post("/v1/jobs/batch", content=body).raise_for_status()
        special = JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp", hold=True,
                            name="needle-in-queue")  # fmt: skip
        needle = session.post("/v1/jobs", content=to_json(special)).json()["job_id"]
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


def row_cells(page: Any, row: str) -> list[str]:
    return list(page.eval_on_selector_all(f"{row} td", "cells => cells.map(c => c.textContent)"))


def finished(c: HalClient, job_id: int) -> bool:
    return c.job(job_id).state in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


@pytest.fixture(scope="module")
def alice(hal: LiveServer) -> Iterator[HalClient]:
    """A client with alice's token (a user in account ``lattice``)."""
    with hal.client() as admin:
        token = admin.add_user("alice").token
    with hal.client(token) as client:
        yield client


def test_fair_share_shows_the_tree_usage_and_the_jobs_a_limit_holds(  # type: ignore[no-untyped-def]
    page, hal: LiveServer, alice, tmp_path: Path, shots: Path
) -> None:
    """Yesterday's usage puts chemistry (bob's 1000 s jobs) far over its share and physics
    under it; alice's second job in QoS ``small`` (one running job per user) waits with
    ``QOSMaxJobsPerUserLimit`` although the nodes have room, and the limits panel says so."""
    small = JobSubmit(script="#!/bin/sh\nsleep 120\n", workdir=str(tmp_path), qos="small",
                      time_limit_seconds=300, name="limited")  # fmt: skip
    first = alice.submit(small).job_id
    wait_until(lambda: alice.job(first).state == "RUNNING", 60, message="alice's first job")
    second = alice.submit(small).job_id
    try:
        wait_until(lambda: alice.job(second).reason == "QOSMaxJobsPerUserLimit", 30,
                   message="the limit reason")  # fmt: skip
        page.click('nav a[data-tab="fairshare"]')
        page.wait_for_selector('#fs-limits tr[data-reason="QOSMaxJobsPerUserLimit"]')
        cells = row_cells(page, '#fs-limits tr[data-reason="QOSMaxJobsPerUserLimit"]')
        assert cells[1:3] == ["QoS max_jobs_per_user", "1"]
        assert f"{second} (alice)" in cells[3]
        # the limits themselves, used against each cap (GET /v1/limits)
        qos = row_cells(page, '#fs-usage tr[data-kind="qos"][data-name="small"]')
        assert qos[:4] == ["QoS", "small", "1", "max 1: alice 1"]
        lattice = row_cells(page, '#fs-usage tr[data-kind="account"][data-name="lattice"]')
        assert lattice[2] == "1" and lattice[4].endswith(" / 64"), lattice
        assert int(lattice[4].split(" / ")[0]) >= 1
        with hal.client() as admin:
            shares = {(r.account, r.user): r for r in admin.shares().rows}
        for account in ("physics", "lattice", "chemistry"):
            shown = page.inner_text(
                f'#fs-shares tr[data-account="{account}"][data-user=""] td:last-child'
            )
            # alice's running job adds usage between the page's read and ours
            assert float(shown) == pytest.approx(shares[(account, "")].fairshare, abs=0.01)
        assert shares[("chemistry", "")].fairshare < 0.5 < shares[("physics", "")].fairshare
        assert page.inner_text('#fs-shares tr[data-user="bob"] td:first-child').strip() == "bob"
        assert "half-life 7.0 d" in page.inner_text("#fs-mode")
        # the next pending jobs with their weighted factors: alice's waiting job leads
        # (the other tests' held jobs have priority 0: they sort last, sprio leaves them out)
        page.wait_for_selector(f'#fs-priority tr[data-job="{second}"]')
        assert "priority/multifactor" in page.inner_text("#fs-weights")
        cells = row_cells(page, f'#fs-priority tr[data-job="{second}"]')
        assert cells[1:5] == ["alice", "lattice", "small", "debug"]
        page.screenshot(path=str(shots / "fairshare.png"), full_page=True)
    finally:
        for job_id in (first, second):
            alice.cancel(str(job_id))


def test_prediction_quality_shows_the_model_its_accuracy_and_running_jobs(  # type: ignore[no-untyped-def]
    page, hal: LiveServer, alice, tmp_path: Path, shots: Path
) -> None:
    """The model trained on the history, the accuracy over it and over jobs that have
    just finished here, and a running job drawn against its predicted run time."""
    quick = JobSubmit(script="#!/bin/sh\nsleep 1\n", workdir=str(tmp_path), name="sim",
                      time_limit_seconds=3600)  # fmt: skip
    done = [alice.submit(quick).job_id for _ in range(3)]
    wait_until(lambda: all(finished(alice, j) for j in done), 60, message="the quick jobs")
    with hal.client() as admin:
        wait_until(lambda: admin.predict_status().finished_jobs_seen >= HISTORY + 3, 30,
                   message="the predictor to observe them")  # fmt: skip
    slow = alice.submit(JobSubmit(script="#!/bin/sh\nsleep 120\n", workdir=str(tmp_path),
                                  name="sim", time_limit_seconds=3600)).job_id  # fmt: skip
    try:
        wait_until(lambda: alice.job(slow).state == "RUNNING", 60, message="the slow job")
        page.click('nav a[data-tab="prediction"]')
        page.wait_for_selector(f'#pred-chart g[data-job="{slow}"] rect.pred-bar')
        with hal.client() as admin:
            st = admin.predict_status()
        assert st.model_version > 0 and st.recent.accuracy is not None
        cards = page.inner_text("#pred-cards")
        assert "learned" in cards and f"model v{st.model_version}" in cards
        assert f"{st.trained_on}\nTrained on" in cards
        # the page polls: the window may have grown by the time it is read, not shrunk
        jobs = int(page.inner_text('#pred-accuracy tr[data-measure="Jobs"] td:nth-child(2)'))
        assert HISTORY + 3 <= jobs <= st.recent.jobs + 1
        shown = page.inner_text(
            '#pred-accuracy tr[data-measure="Accuracy (Tsafrir)"] td:nth-child(2)'
        )
        assert 0 < float(shown) <= 1
        assert "%" in page.inner_text('#pred-accuracy tr[data-measure="Under-predicted"]')
        # the bar's label says "elapsed / predicted", the prediction GET /v1/jobs/{id}
        # gives (corrected upwards once the job outlives it: both sides move, so wait
        # until a read of each agrees)
        label = f'#pred-chart g[data-job="{slow}"] text:last-of-type'

        def agrees() -> bool:
            predicted = alice.job(slow).predicted_runtime_seconds
            text = page.text_content(label) or ""
            return predicted is not None and text.endswith(" / " + fmt_seconds(predicted))

        wait_until(agrees, 15, message="the chart to show the job's predicted run time")
        # finished jobs: one dot each, placed by the prediction made when it started
        with hal.client() as admin:
            recent = admin.predict_finished(200).jobs
        ids = [f.job_id for f in recent]
        assert {str(j) for j in done} <= set(ids) and len(recent) == 200  # history fills it
        assert all(f.actual_seconds < 10 for f in recent if f.job_id in {str(j) for j in done})
        page.wait_for_selector(f'#pred-finished circle[data-job="{done[0]}"]')
        assert page.locator("#pred-finished circle").count() == len(recent)
        under = sum(f.actual_seconds > f.predicted_seconds for f in recent)
        assert page.locator("#pred-finished circle.dot-under").count() == under
        assert f"{len(recent)} jobs, {under} ran longer" in page.inner_text("#pred-finished-info")
        page.screenshot(path=str(shots / "prediction.png"), full_page=True)
    finally:
        alice.cancel(str(slow))


def fmt_seconds(s: float) -> str:
    """The dashboard's ``fmtSeconds``."""
    if s < 60:
        return f"{s:.{1 if s < 10 else 0}f} s"
    if s < 3600:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h" if s < 86400 else f"{s / 86400:.1f} d"


def test_the_data_tab_says_how_to_turn_the_data_plane_on(page, shots: Path) -> None:  # type: ignore[no-untyped-def]
    """This server has no [data] table: /v1/data/status answers 404 not_configured and
    the tab shows how to add one instead of empty numbers."""
    page.click('nav a[data-tab="data"]')
    page.wait_for_selector("#data-off:not([hidden])")
    text = page.inner_text("#data-off")
    assert "[data]" in text and "cache_url" in text and "docs/user/data.md" in text
    assert "no data plane" in page.inner_text("#data-off-reason")  # the server's own words
    assert page.is_hidden("#data-on")
    page.screenshot(path=str(shots / "data-off.png"))
    page.click('nav a[data-tab="alerts"]')
    page.wait_for_selector("#alerts-firing tbody tr")


# -- a server with [data]: a real cache control plane and a root and leaf cache node ------
@pytest.fixture(scope="module")
def data_hal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Any, Any]]:
    """root ── node1 (the leaf the HAL node node1 reads through), with the processes of
    tests/integration/cache/cachetree.py."""
    cache_tests = str(Path(__file__).resolve().parents[1] / "cache")
    if cache_tests not in sys.path:
        sys.path.insert(0, cache_tests)
    from cachetree import ControlPlane, Node, registered, start_all, wait_for

    from hal.config.model import DataConfig

    tmp = tmp_path_factory.mktemp("hal-ui-data")
    cp = ControlPlane(tmp)
    cache = {
        "root": Node(tmp, cp, "root", None, "root"),
        "node1": Node(tmp, cp, "node1", "root", "leaf"),
    }
    server = LiveServer(tmp / "hal", config_overrides={
        "data": DataConfig(cache_url=cp.url, refresh_seconds=0.5)})  # fmt: skip
    try:
        start_all([cp, *cache.values()])
        wait_for(lambda: registered(cp, list(cache)), 30, "the cache nodes to register")
        server.start()
        server.start_agent("node1", cpus=1)
        with server.client() as c:
            wait_until(lambda: any(n.name == "node1" and n.state == "UP" for n in c.nodes()), 60,
                       message="the agent")  # fmt: skip
        yield server, cp, cache
    finally:
        server.stop()
        for node in cache.values():
            node.kill()
        cp.kill()


def test_the_data_tab_shows_the_view_and_pre_staging(  # type: ignore[no-untyped-def]
    browser, data_hal, shots: Path
) -> None:
    """An input at the root is pre-staged into node1's leaf for the job placed there; the
    tab shows a fresh view of both cache instances and one staging."""
    server, cp, cache = data_hal
    assert cache["root"].client().set("ds:ui-input", b"x" * 1_000_000)
    headers = {"Authorization": f"Bearer {server.token}"}

    def staged() -> int:
        status = http.get(f"{server.url}/v1/data/status", headers=headers, timeout=10)
        return int(status.raise_for_status().json()["prestage"]["staged"])

    with server.client() as c:
        job_id = c.submit(JobSubmit(script="#!/bin/sh\ntrue\n", workdir="/tmp",
                                    data=["ds:ui-input"])).job_id  # fmt: skip
        wait_until(lambda: finished(c, job_id), 60, message="the data job")
    wait_until(lambda: staged() == 1, 30, message="the pre-staging to be counted")
    page = open_dashboard(browser, server)
    try:
        page.click('nav a[data-tab="data"]')
        page.wait_for_selector("#data-on:not([hidden])")
        page.wait_for_function(
            "document.querySelector('#data-prestage tr[data-result=\"staged\"] td:nth-child(2)')"
            "?.textContent === '1'"
        )
        cards = page.inner_text("#data-cards")
        assert "fresh\nData view" in cards and "2\nCache instances" in cards
        assert "976.6 KiB\nBytes staged" in cards  # 1,000,000 bytes
        assert cp.url in page.inner_text("#data-fields")
        assert page.is_hidden("#data-off")
        page.screenshot(path=str(shots / "data.png"), full_page=True)
    finally:
        page.close()


def test_the_data_tab_shows_each_cache_nodes_hits_misses_and_bytes_moved(  # type: ignore[no-untyped-def]
    browser, data_hal, shots: Path
) -> None:
    """node1 reads a root key twice (a miss pulled from the root, then a hit); once the
    nodes' heartbeats have carried that to the server, the Cache nodes table shows each
    instance's hits, misses, hit ratio and bytes moved as /v1/data/status has them."""
    server, _cp, cache = data_hal
    headers = {"Authorization": f"Bearer {server.token}"}

    def caches() -> dict[str, dict[str, Any]]:
        status = http.get(f"{server.url}/v1/data/status", headers=headers, timeout=10)
        return {c["instance"]: c for c in status.raise_for_status().json()["caches"]}

    wait_until(lambda: {"root", "node1"} <= set(caches()), 30,
               message="both nodes' counters to reach the server")  # fmt: skip
    before = caches()["node1"]
    assert cache["root"].client().set("ds:ui-read", b"r" * 3072)
    for _ in range(2):
        assert cache["node1"].client().get("ds:ui-read") == b"r" * 3072
    wait_until(
        lambda: caches()["node1"]["hits"] > before["hits"]
        and caches()["node1"]["bytes_moved"]["parent"] >= before["bytes_moved"]["parent"] + 3072,
        30, message="node1's reads to reach the server",
    )  # fmt: skip
    node1 = caches()["node1"]
    assert node1["misses"] > before["misses"]
    page = open_dashboard(browser, server)
    try:
        page.click('nav a[data-tab="data"]')
        row = '#data-caches tr[data-instance="node1"]'
        page.wait_for_selector(row)
        page.wait_for_function(
            f"document.querySelector('{row} td:nth-child(4)')?.textContent === '{node1['hits']}'"
        )
        cells = row_cells(page, row)
        assert cells[:5] == ["node1", "leaf", "active", str(node1["hits"]), str(node1["misses"])]
        assert cells[5] == f"{100 * node1['hit_ratio']:.1f} %"
        moved = node1["bytes_moved"]["parent"]
        assert cells[7] == (f"{moved / 1024:.1f} KiB" if moved < 1024**2
                            else f"{moved / 1024**2:.1f} MiB")  # fmt: skip
        assert cells[8] == "0 B"  # no peers in this tree
        assert row_cells(page, '#data-caches tr[data-instance="root"]')[1] == "root"
        cards = page.inner_text("#data-cards")
        assert "Cache hit ratio" in cards and "Bytes moved" in cards
        page.screenshot(path=str(shots / "data-caches.png"), full_page=True)
    finally:
        page.close()


def test_fair_share_on_a_server_without_a_priority_table(  # type: ignore[no-untyped-def]
    browser, data_hal, shots: Path
) -> None:
    """No [priority]: the queue is first in, first out (priority/basic); the tab says so
    in the server's words and still shows the share tree (usage is tracked either way)."""
    server, _cp, _cache = data_hal
    page = open_dashboard(browser, server)
    try:
        page.click('nav a[data-tab="fairshare"]')
        page.wait_for_function(
            "document.querySelector('#fs-weights').textContent === 'priority/basic'"
        )
        assert "[priority]" in page.inner_text("#fs-priority-note")
        assert row_cells(page, '#fs-shares tr[data-account="root"]')[0] == "root"
        assert "no pending job is held by a limit" in page.inner_text("#fs-limits")
        page.screenshot(path=str(shots / "fairshare-basic.png"))
    finally:
        page.close()


def test_a_node_whose_agent_is_silent_is_marked_on_the_map(  # type: ignore[no-untyped-def]
    browser, tmp_path: Path, shots: Path
) -> None:
    """An agent that stops heartbeating (SIGSTOP: a hung node) is shown as sinfo shows
    it, ``idle*``, and marked not responding; once it heartbeats again the mark goes."""
    quick = {"heartbeat_interval_seconds": 0.5}  # not responding after 1 s of silence
    with LiveServer(tmp_path / "srv", config_overrides=quick) as server:
        agent = server.start_agent("node1", cpus=2)
        page = open_dashboard(browser, server)
        try:
            tile = '[data-node="node1"][data-state="idle"]'
            page.wait_for_selector(f'{tile}[data-flags=""]')
            agent.send_signal(signal.SIGSTOP)
            try:
                silent = page.wait_for_selector(f'{tile}[data-flags*="NOT_RESPONDING"]')
                assert "idle*" in silent.inner_text()
                assert "not-responding" in (silent.get_attribute("class") or "")
                page.screenshot(path=str(shots / "node-not-responding.png"))
            finally:
                agent.send_signal(signal.SIGCONT)
            page.wait_for_selector(f'{tile}[data-flags=""]')
            assert "idle*" not in page.inner_text("#node-map")
        finally:
            page.close()
            stop_process(agent)


def test_a_gpu_jobs_detail_shows_what_it_does_with_its_gpus(  # type: ignore[no-untyped-def]
    browser, tmp_path: Path, shots: Path
) -> None:
    """A running job whose process holds 3 GiB at 80 % of its GPU (the stand-in NVML of
    ``tests/data/nvml``): its detail shows its GPU use, as sstat's TRESUsageInMax."""
    stand_in = str(Path(__file__).parents[2] / "data" / "nvml")
    path = os.pathsep.join(p for p in (stand_in, os.environ.get("PYTHONPATH", "")) if p)
    with LiveServer(tmp_path / "srv") as server:
        agent = server.start_agent("gpu1", cpus=2, env={"PYTHONPATH": path})
        with server.client() as c:
            wait_until(lambda: any(n.name == "gpu1" and n.gpus == 1 for n in c.nodes()))
            script = "#!/bin/sh\nHAL_TEST_GPU_USE=3221225472:80 exec sleep 60\n"
            job_id = c.submit(
                JobSubmit(script=script, workdir=str(tmp_path), gpus_per_node=1)
            ).job_id
            wait_until(lambda: c.job(job_id).gpu_usage is not None, 30, message="a GPU sample")
        page = open_dashboard(browser, server)
        try:
            page.click('nav a[data-tab="queue"]')
            page.click(f'#queue-table tr[data-job="{job_id}"]')
            page.wait_for_function(
                "() => document.querySelector('#d-fields').textContent.includes('GPU use')"
            )
            fields = page.inner_text("#d-fields")
            assert "GPU use\n3.0 GiB most, 80 % most, 80 % mean" in fields, fields
            page.screenshot(path=str(shots / "job-detail-gpu.png"))
        finally:
            page.close()
            stop_process(agent)


def test_the_software_tab_lists_the_artifacts_published(  # type: ignore[no-untyped-def]
    page, hal: LiveServer, tmp_path: Path, shots: Path
) -> None:
    page.click('nav a[data-tab="software"]')
    page.wait_for_selector("#software-artifacts tr.empty")  # nothing published yet
    tool = tmp_path / "tool"
    tool.write_bytes(b"#!/bin/sh\necho tool\n")
    with hal.client() as c:
        c.push_artifact("tool", "1.0", tool)
        c.push_artifact("tool", "1.1", tool)  # the same content: stored once
    page.wait_for_selector('#software-artifacts tr[data-artifact="tool@1.1"]')
    cells = row_cells(page, '#software-artifacts tr[data-artifact="tool@1.0"]')
    assert cells[:4] == ["tool", "1.0", "program", "20 B"] and cells[5] == "admin"
    assert "2\nVersions" in page.inner_text("#software-cards")
    assert "20 B\nStored" in page.inner_text("#software-cards")
    page.screenshot(path=str(shots / "software.png"))


def test_the_cloud_tab_says_how_to_add_a_node_group(page, shots: Path) -> None:  # type: ignore[no-untyped-def]
    page.click('nav a[data-tab="cloud"]')
    page.wait_for_selector("#cloud-off:not([hidden])")
    assert "[[cloud.groups]]" in page.inner_text("#cloud-off")
    assert page.is_hidden("#cloud-on")


def test_the_cloud_tab_shows_the_groups_and_the_node_made_for_a_job(  # type: ignore[no-untyped-def]
    browser, tmp_path: Path, shots: Path
) -> None:
    """A local group (agent processes on this host) makes a node for a job that no joined
    node holds; the tab shows the group and the node, booting then joined, this month's
    spend and the account's cloud_budget; the queue shows the job's cost so far."""
    import json

    import psutil

    toml = tmp_path / "hal.toml"
    toml.write_text(
        "[cloud]\ninterval_seconds = 0.5\npending_seconds = 0\n"
        '[[cloud.groups]]\nname = "burst"\nprovider = "local"\nnodes = "burst[1-2]"\n'
        'cpus = 2\nmemory = "1G"\nprice_per_hour = 0.25\n'
        '[[accounts]]\nname = "physics"\ncloud_budget = "100 USD/month"\n'
    )
    server = LiveServer(tmp_path / "data", config_file=toml)
    server.start()
    page = open_dashboard(browser, server)
    try:
        with server.client() as c:
            job = c.submit(JobSubmit(script="#!/bin/sh\nsleep 30\n", workdir=str(tmp_path)))
        page.click('nav a[data-tab="cloud"]')
        page.wait_for_selector('#cloud-groups tr[data-group="burst"]')
        page.wait_for_selector('#cloud-nodes tr[data-node="burst1"]')
        joined = '#cloud-nodes tr[data-node="burst1"]:not([data-state="booting"])'
        page.wait_for_selector(joined, timeout=30_000)  # (idle once its job has ended)
        assert row_cells(page, joined)[2] in ("joined", "idle")
        group = row_cells(page, '#cloud-groups tr[data-group="burst"]')
        assert group[:4] == ["burst", "local", "1 / 2", "2"] and group[-1] == "ready"
        assert "$0.25\nCost an hour" in page.inner_text("#cloud-cards")
        assert "this month" in page.inner_text("#cloud-cards")
        budget = row_cells(page, '#cloud-budgets tr[data-budget="account physics"]')
        assert budget[:3] == ["account physics", "$100.00", "month"]
        page.screenshot(path=str(shots / "cloud.png"))
        page.click('nav a[data-tab="queue"]')
        page.select_option("#f-state", "ALL")  # (it may have ended: its cost stays)
        row = f'#queue-table tr[data-job="{job.job_id}"]'
        page.wait_for_selector(row)
        assert row_cells(page, row)[-1].startswith("$0.0")
    finally:
        page.close()
        server.stop()
        for record in (tmp_path / "data" / "cloud" / "burst" / "instances").glob("*.json"):
            with contextlib.suppress(ValueError, OSError, psutil.Error):
                proc = psutil.Process(int(json.loads(record.read_text())["pid"]))
                for member in [*proc.children(recursive=True), proc]:
                    member.kill()
