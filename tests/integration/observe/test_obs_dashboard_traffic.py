"""The dashboard's Traffic tab in headless Chromium (Debian's ``chromium`` driven by
Playwright), against a real server fed real agent syncs.

Three nodes are played by hand over the agent channel (as in
tests/integration/server/planes/test_harmonic_graph_server.py): ann's ``db`` on n1 is
called by bob's ``client`` on n2, and carol's ``worker`` calls her ``cache`` on n3 (in
partition ``batch``), all over 127.0.0.1 as local agents on one machine do. Before the
agents report traffic the tab says what makes an edge; once they have, it draws the four
jobs and the two edges with their bytes per second, and the user and partition filters
and the workloads view narrow and change it. Screenshots go to
``$HAL_TEST_OUTPUT_DIR/dashboard`` (default: pytest's temporary directory)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from conftest_helpers import ARGS, BROWSER_MARKS, CHROMIUM

from hal.config.model import PartitionConfig
from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.submit import JobSubmit

T = TypeVar("T")
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")
pytestmark = BROWSER_MARKS
PARTITIONS = (
    PartitionConfig(name="debug", default=True, nodes=("n1", "n2")),
    PartitionConfig(name="batch", nodes=("n3",)),
)
LOOPBACK = "127.0.0.1"
INTERVAL = 10.0  # seconds each report's bytes were measured over
# (bytes each side sent in the one report): db answers 300 kB to the client's 100 kB;
# the cache 25 MB to the worker's 5 MB
DB_EDGE = 400_000
CACHE_EDGE = 30_000_000


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = os.environ.get("HAL_TEST_OUTPUT_DIR")
    path = Path(base) / "dashboard" if base else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def post(live: LiveServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    auth = {"Authorization": f"Bearer {live.agent_token}"}
    r = http.post(live.url + path, json=body, headers=auth, timeout=30)
    assert r.status_code == 200, r.text
    reply: dict[str, Any] = r.json()
    return reply


def start(live: LiveServer, node: str, jobs: list[int]) -> dict[int, int]:
    """Wait for ``jobs``' launches on ``node`` and report them started; their attempts."""
    found: dict[int, int] = {}

    def launch() -> bool:
        reply = post(live, f"/v1/agent/{node}/sync", {"wait_seconds": 1})
        found.update(
            (i["job_id"], i["attempt"]) for i in reply["instructions"] if i["op"] == "launch"
        )
        return set(jobs) <= set(found)

    wait_until(launch, 30, message=f"jobs {jobs} to launch on {node}")
    reports = [{"seq": n + 1, "job_id": j, "attempt": found[j], "time": 1.0, "kind": "started"}
               for n, j in enumerate(jobs)]  # fmt: skip
    post(live, f"/v1/agent/{node}/sync", {"reports": reports, "wait_seconds": 0})
    return {j: found[j] for j in jobs}


def side(
    job: int, attempt: int, local: int, remote: int, sent: int, listen: bool
) -> dict[str, Any]:
    """One job's report of its end of one TCP connection over 127.0.0.1."""
    return {
        "job_id": job,
        "attempt": attempt,
        "interval_seconds": INTERVAL,
        "listening": [{"address": LOOPBACK, "port": local}] if listen else [],
        "flows": [{"local": {"address": LOOPBACK, "port": local},
                   "remote": {"address": LOOPBACK, "port": remote},
                   "bytes_sent": sent, "bytes_received": 0}],
    }  # fmt: skip


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LiveServer, dict[str, int]]]:
    """The server and its four running jobs by name; no traffic reported yet."""
    # no heartbeats but the syncs here: a node must not time out while the browser reads
    overrides = {"partitions": PARTITIONS, "node_timeout_seconds": 3600.0}
    with LiveServer(tmp_path_factory.mktemp("hal-traffic"), config_overrides=overrides) as live:
        for node in ("n1", "n2", "n3"):
            post(live, "/v1/agent/register", {"node": node, "cpus": 2, "memory_bytes": 2**31})
        tokens = live.add_users("ann", "bob", "carol")
        script = "#!/bin/sh\nsleep 600\n"
        jobs: dict[str, int] = {}
        # carol labels her two jobs one workload (carol/kv): they talk among themselves
        for user, name, node, partition, comment in (
            ("ann", "db", "n1", "debug", ""),
            ("bob", "client", "n2", "debug", ""),
            ("carol", "cache", "n3", "batch", "harmonic=kv"),
            ("carol", "worker", "n3", "batch", "harmonic=kv"),
        ):
            spec = JobSubmit(script=script, name=name, nodelist=[node], partition=partition,
                             comment=comment)  # fmt: skip
            with live.client(tokens[user]) as c:
                jobs[name] = c.submit(spec).job_id
        start(live, "n1", [jobs["db"]])
        start(live, "n2", [jobs["client"]])
        start(live, "n3", [jobs["cache"], jobs["worker"]])
        yield live, jobs


def report_traffic(live: LiveServer, jobs: dict[str, int]) -> None:
    """Each node's agent reports its jobs' ends of the two connections (attempt 0)."""
    db = side(jobs["db"], 0, 5432, 40000, 300_000, listen=True)
    client = side(jobs["client"], 0, 40000, 5432, 100_000, listen=False)
    cache = side(jobs["cache"], 0, 6379, 40001, 25_000_000, listen=True)
    worker = side(jobs["worker"], 0, 40001, 6379, 5_000_000, listen=False)
    post(live, "/v1/agent/n1/sync", {"wait_seconds": 0, "traffic": [db]})
    post(live, "/v1/agent/n2/sync", {"wait_seconds": 0, "traffic": [client]})
    post(live, "/v1/agent/n3/sync", {"wait_seconds": 0, "traffic": [cache, worker]})


@pytest.fixture(scope="module")
def page(cluster: tuple[LiveServer, dict[str, int]]) -> Iterator[Any]:
    live, _jobs = cluster
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            opened = browser.new_page(viewport={"width": 1366, "height": 768})  # a laptop's
            opened.set_default_timeout(15_000)
            opened.goto(f"{live.url}/ui#token={live.token}")
            opened.click('nav a[data-tab="traffic"]')
            yield opened
        finally:
            browser.close()


def drawn(page: Any) -> tuple[list[str], dict[str, str]]:
    """The nodes on the graph, and each edge's label by its two ends."""
    nodes = page.eval_on_selector_all(
        "#traffic-graph .graph-node", "gs => gs.map(g => g.dataset.node)"
    )
    labels = page.eval_on_selector_all(
        "#traffic-graph text.edge-label", "ts => ts.map(t => [t.dataset.edge, t.textContent])"
    )
    return sorted(nodes), dict(labels)


def rate(label: str) -> float:
    """``"1.5 MB/s"`` → 1.5e6 (the dashboard writes decimal units, as hal harmonic graph)."""
    return shown_with_step(label)[0]


def shown_with_step(label: str) -> tuple[float, float]:
    """A label's bytes per second and the step it is written to (``"2.5 MB/s"``: 0.1
    MB/s; ``"830 B/s"``: 1 B/s), so a check allows for the rounding."""
    m = re.fullmatch(r"([\d.]+) (B|kB|MB|GB)/s", label)
    assert m, label
    unit = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}[m[2]]
    return float(m[1]) * unit, unit if m[2] == "B" else unit / 10


def between(by_edge: dict[str, T], a: object, b: object) -> T:
    """What ``by_edge`` holds for the edge between ``a`` and ``b``, whichever end the
    page names first."""
    return by_edge[f"{a} {b}"] if f"{a} {b}" in by_edge else by_edge[f"{b} {a}"]


def test_with_no_traffic_the_tab_says_what_makes_an_edge(page: Any, shots: Path) -> None:
    page.wait_for_selector("#traffic-empty:not([hidden])")
    text = page.inner_text("#traffic-empty")
    assert "No running jobs talk to each other yet" in text
    assert "TCP traffic" in text and "--traffic-interval" in text and "hal agent" in text
    assert drawn(page) == ([], {})
    assert "stale" not in (page.get_attribute("#live", "class") or "")  # drawn, no error
    page.screenshot(path=str(shots / "traffic-empty.png"), full_page=True)


def test_reported_traffic_draws_the_jobs_and_their_rates(
    page: Any, cluster: tuple[LiveServer, dict[str, int]], shots: Path
) -> None:
    """The page polls: the edges appear without a reload, each labelled with the bytes
    per second both ends sent over the time watched (10 s measured, plus the time
    since), and the stronger edge drawn wider."""
    live, jobs = cluster
    sent = time.time()
    report_traffic(live, jobs)
    # (a poll may fall between the three nodes' reports: wait for both edges)
    page.wait_for_function(
        "document.querySelectorAll('#traffic-graph text.edge-label').length === 2"
    )
    nodes, labels = drawn(page)
    watched = INTERVAL + time.time() - sent  # at most, when the labels were read
    assert nodes == sorted(str(j) for j in jobs.values())
    assert len(labels) == 2
    for (a, b), total in ((("db", "client"), DB_EDGE), (("cache", "worker"), CACHE_EDGE)):
        # (the label is rounded to its step: 2.5 MB/s is 2.45-2.55 MB/s)
        shown, step = shown_with_step(between(labels, jobs[a], jobs[b]))
        low, high = total / watched * 0.99 - step / 2, total / INTERVAL * 1.01 + step / 2
        assert low <= shown <= high, (a, b, shown)
    widths = dict(page.eval_on_selector_all(
        "#traffic-graph g.edge line",
        "ls => ls.map(l => [l.parentNode.dataset.edge, +l.getAttribute('stroke-width')])",
    ))  # fmt: skip
    assert between(widths, jobs["cache"], jobs["worker"]) > between(
        widths, jobs["db"], jobs["client"]
    )
    assert "4 running jobs, 2 edges" in page.inner_text("#traffic-info")
    db = page.text_content(f'#traffic-graph .graph-node[data-node="{jobs["db"]}"] text')
    assert db == f"{jobs['db']} db"
    assert len(page.query_selector_all("#traffic-edges tbody tr[data-edge]")) == 2
    page.screenshot(path=str(shots / "traffic.png"), full_page=True)


def test_a_refresh_updates_the_rates_and_moves_no_node(page: Any) -> None:
    """The layout depends on which nodes and edges there are, not on their rates: a
    refresh changes the labels (the rates fall as the time watched grows), not where
    the jobs are drawn."""
    label = "#traffic-graph text.edge-label"
    page.wait_for_selector(label)
    where = "gs => gs.map(g => [g.dataset.node, g.querySelector('circle').getAttribute('cx'),"
    where += " g.querySelector('circle').getAttribute('cy')])"
    before = page.eval_on_selector_all("#traffic-graph .graph-node", where)
    first = page.text_content(label)
    page.wait_for_function(
        f"document.querySelector('{label}').textContent !== {first!r}", timeout=20_000
    )
    assert page.eval_on_selector_all("#traffic-graph .graph-node", where) == before


def test_the_user_and_partition_filters_keep_only_their_edges(
    page: Any, cluster: tuple[LiveServer, dict[str, int]]
) -> None:
    _live, jobs = cluster
    page.wait_for_selector("#traffic-graph text.edge-label")
    page.select_option("#t-user", "bob")
    page.wait_for_function(
        "document.querySelectorAll('#traffic-graph text.edge-label').length === 1"
    )
    nodes, labels = drawn(page)
    assert nodes == sorted([str(jobs["db"]), str(jobs["client"])])
    # the user's job is the end named first
    assert list(labels) == [f"{jobs['client']} {jobs['db']}"]

    page.select_option("#t-user", "")
    page.select_option("#t-partition", "batch")
    page.wait_for_function(
        f"document.querySelector('#traffic-graph .graph-node[data-node=\"{jobs['cache']}\"]') &&"
        " document.querySelectorAll('#traffic-graph .graph-node').length === 2"
    )
    nodes, _labels = drawn(page)
    assert nodes == sorted([str(jobs["cache"]), str(jobs["worker"])])

    page.select_option("#t-user", "ann")  # ann has no job in batch
    page.wait_for_selector("#traffic-empty:not([hidden])")
    said = page.inner_text("#traffic-empty")
    assert "No edge has jobs of user ann in partition batch at an end" in said
    page.select_option("#t-user", "")
    page.select_option("#t-partition", "")
    page.wait_for_function(
        "document.querySelectorAll('#traffic-graph text.edge-label').length === 2"
    )


def test_the_workloads_view_draws_each_workload_once(page: Any, shots: Path) -> None:
    """Nodes are USER/NAME, or USER/LABEL of --comment=harmonic=LABEL; the two jobs of
    carol/kv talking to each other are a loop on it."""
    page.wait_for_selector("#traffic-graph text.edge-label")
    page.select_option("#t-view", "workloads")
    page.wait_for_selector('#traffic-graph .graph-node[data-node="ann/db"]')
    nodes, labels = drawn(page)
    assert nodes == ["ann/db", "bob/client", "carol/kv"]
    assert {frozenset(k.split(" ")) for k in labels} == {
        frozenset({"ann/db", "bob/client"}),
        frozenset({"carol/kv"}),
    }
    assert page.query_selector('#traffic-graph g.edge[data-edge="carol/kv carol/kv"] circle')
    assert rate(labels["carol/kv carol/kv"]) > rate(between(labels, "ann/db", "bob/client"))
    legend = page.eval_on_selector_all("#traffic-legend span", "ss => ss.map(s => s.dataset.user)")
    assert legend == ["ann", "bob", "carol"]
    page.screenshot(path=str(shots / "traffic-workloads.png"), full_page=True)
    page.select_option("#t-view", "jobs")


def test_the_tabs_endpoint_says_when_it_left_edges_out_and_refuses_an_unknown_view(
    page: Any, cluster: tuple[LiveServer, dict[str, int]]
) -> None:
    live, _jobs = cluster
    page.wait_for_selector("#traffic-graph text.edge-label")  # the traffic is in
    auth = {"Authorization": f"Bearer {live.token}"}
    url = live.url + "/v1/observe/traffic"
    strongest = http.get(url, params={"limit": 1}, headers=auth, timeout=10).json()
    assert len(strongest["edges"]) == 1 and strongest["more"] is True
    assert len(strongest["nodes"]) == 2
    every = http.get(url, params={"limit": 2}, headers=auth, timeout=10).json()
    assert len(every["edges"]) == 2 and every["more"] is False
    assert every["partitions"] == ["batch", "debug"]
    wrong = http.get(url, params={"view": "hosts"}, headers=auth, timeout=10)
    assert wrong.status_code == 400 and "jobs or workloads" in wrong.text
