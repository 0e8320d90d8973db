"""Data-aware scheduling end to end: a real cache control plane, a tree of real
``hal cache node`` processes, a real HAL server with ``[data]`` and real agents whose
node names are the leaf instances' ids::

    root ─┬─ b1 ─┬─ node1
          │      └─ node2
          └─ node3

Pins down: a job goes to the node whose leaf cache holds its input; a job whose input
sits at a branch gets it staged into its leaf; a backfill reservation's inputs are
staged before the job starts; ``hal data locate`` / ``hal data stage``; the nodes' hits,
misses and bytes moved in ``hal data status`` and ``/metrics``; and a dead cache control
plane leaves scheduling working.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cachetree import ControlPlane, Node, start_nodes, wait_for

from hal.client import HalClient
from hal.config.model import DataConfig
from hal.scheduler.plugins import default_profile
from hal.testing import http
from hal.testing.live import LiveServer, wait_until
from hal.wire.jobs import JobSubmit

MB = 1_000_000
LEAF_OF = {"node1": "node1", "node2": "node2", "node3": "node3"}


class DataCluster:
    def __init__(self, tmp: Path) -> None:
        self.cp = ControlPlane(tmp)
        self.cache = {
            "root": Node(tmp, self.cp, "root", None, "root"),
            "b1": Node(tmp, self.cp, "b1", "root", "branch"),
            "node1": Node(tmp, self.cp, "node1", "b1", "leaf"),
            "node2": Node(tmp, self.cp, "node2", "b1", "leaf"),
            "node3": Node(tmp, self.cp, "node3", "root", "leaf"),
        }
        # backfill on every pass (bf_interval 0) so a reservation shows up at once
        profile: dict[str, Any] = default_profile(data=True)
        profile["plugin_args"] = {**profile["plugin_args"], "backfill": {"interval_s": 0}}
        self.server = LiveServer(
            tmp / "hal",
            config_overrides={
                "data": DataConfig(
                    cache_url=self.cp.url,
                    refresh_seconds=0.5,
                    datasets={"pair": ("ds:at-node2", "ds:at-b1")},
                ),
                "scheduler_profile": profile,
            },
        )

    def start(self) -> None:
        self.cp.start()
        start_nodes(self.cp, list(self.cache.values()))
        self.server.start()
        for name in ("node1", "node2", "node3"):
            self.server.start_agent(name, cpus=1)
        with self.server.client() as c:
            wait_until(
                lambda: (
                    {"node1", "node2", "node3"} <= {n.name for n in c.nodes() if n.state == "UP"}
                ),
                60,
                message="the agents to register",
            )
        wait_until(self.view_ready, 30, message="the data view to know the cache tree")

    def view_ready(self) -> bool:
        r = self.server.cli("data", "status", "--json")
        return r.returncode == 0 and '"stale": false' in r.stdout and '"instances": 5' in r.stdout

    def stop(self) -> None:
        self.server.stop()
        for node in self.cache.values():
            node.kill()
        self.cp.kill()

    def put(self, instance: str, key: str, size: int) -> None:
        """An origin write at ``instance``; returns once the control plane has it."""
        assert self.cache[instance].client().set(key, b"x" * size)
        wait_for(lambda: instance in self.cp.holders(key), 10, f"{key} at {instance}")

    def holds(self, instance: str, key: str) -> bool:
        return bool(self.cache[instance].client().exists(key))


@pytest.fixture(scope="module")
def dc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataCluster]:
    cluster = DataCluster(tmp_path_factory.mktemp("data"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def job(*keys: str, script: str = "true", **more: Any) -> JobSubmit:
    return JobSubmit(script=f"#!/bin/sh\n{script}\n", workdir="/tmp", data=list(keys), **more)


def finished(c: HalClient, jid: int) -> bool:
    return c.job(jid).state in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}


def test_a_job_runs_on_the_node_whose_leaf_cache_holds_its_input(dc: DataCluster) -> None:
    """Three idle nodes; only node2's leaf holds the dataset: sbatch --data puts it there."""
    dc.put("node2", "ds:at-node2", MB)
    r = dc.server.cli("sbatch", "--parsable", "--data=ds:at-node2", "--wrap=true", cwd=Path("/tmp"))
    assert r.returncode == 0, r.stderr
    jid = int(r.stdout.strip().split(";")[0])
    with dc.server.client() as c:
        wait_until(lambda: finished(c, jid), 60, message="the data job to finish")
        info = c.job(jid)
    assert info.state == "COMPLETED"
    assert info.nodes == ["node2"]


def test_a_named_dataset_expands_to_its_keys_and_an_unknown_one_is_refused(
    dc: DataCluster,
) -> None:
    with dc.server.client() as c:
        jid = c.submit(job("@pair", "extra:key", hold=True)).job_id
        assert c.job(jid).data == ["ds:at-node2", "ds:at-b1", "extra:key"]
        c.cancel(jid)
    r = dc.server.cli("sbatch", "--data=@nope", "--wrap=true", cwd=Path("/tmp"))
    assert r.returncode != 0
    assert "no dataset named 'nope'" in r.stderr and "[data.datasets]" in r.stderr


def test_an_input_at_a_branch_is_staged_into_the_leaf_of_the_jobs_node(dc: DataCluster) -> None:
    """The input is at b1 (above node1 and node2): the job goes under b1, and the input is
    pulled into that node's leaf without the job reading it."""
    dc.put("b1", "ds:at-b1", 2 * MB)
    assert not dc.holds("node1", "ds:at-b1") and not dc.holds("node2", "ds:at-b1")
    with dc.server.client() as c:
        jid = c.submit(job("ds:at-b1")).job_id
        wait_until(lambda: finished(c, jid), 60, message="the data job to finish")
        node = c.job(jid).nodes[0]
    assert node in ("node1", "node2")
    wait_for(lambda: dc.holds(LEAF_OF[node], "ds:at-b1"), 15, f"ds:at-b1 staged into {node}")
    wait_for(lambda: node in dc.cp.holders("ds:at-b1"), 10, "the control plane to see the copy")
    r = dc.server.cli("data", "status")
    assert r.returncode == 0 and "staged" in r.stdout


def test_a_backfill_reservation_gets_its_inputs_staged_before_it_starts(dc: DataCluster) -> None:
    """Every node is busy; the job pinned to node1 waits for a reservation there. Its input
    (at the root) reaches node1's leaf while the job is still pending."""
    dc.put("root", "ds:reserved", MB)
    with dc.server.client() as c:
        blockers = [
            c.submit(job(script="sleep 120", time_limit_seconds=300)).job_id for _ in range(3)
        ]
        wait_until(
            lambda: all(c.job(b).state == "RUNNING" for b in blockers), 60,
            message="the blockers to run",
        )  # fmt: skip
        jid = c.submit(job("ds:reserved", nodelist=["node1"], time_limit_seconds=60)).job_id
        try:
            wait_for(lambda: dc.holds("node1", "ds:reserved"), 30, "ds:reserved staged on node1")
            assert c.job(jid).state == "PENDING"
            assert not dc.holds("node2", "ds:reserved")
        finally:
            for b in [*blockers, jid]:
                c.cancel(b)
            wait_until(
                lambda: all(finished(c, b) for b in [*blockers, jid]), 60,
                message="the jobs to end",
            )  # fmt: skip


def test_hal_data_locate_and_stage(dc: DataCluster) -> None:
    dc.put("node2", "ds:shown", 3 * MB)
    # the node reports the copy to the control plane asynchronously: locate after it has
    wait_for(lambda: "node2" in dc.cp.holders("ds:shown"), 10, "the control plane to see ds:shown")
    r = dc.server.cli("data", "locate", "ds:shown")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "key ds:shown  size 3.0 MB"
    assert lines[1] == "holders: node2 (3.0 MB)"
    rows = {line.split()[0]: line.split() for line in lines[3:]}
    assert rows["node2"][1:] == ["node2", "3.0", "MB", "0", "B", "0", "s", "node2", "(local)"]
    # node1 is under b1, node2's sibling: without peer sourcing it reads from the origin
    assert rows["node1"][1:5] == ["node1", "0", "B", "3.0"] and rows["node1"][-1] == "origin"

    dc.put("root", "ds:to-stage", MB)
    assert not dc.holds("node3", "ds:to-stage")
    r = dc.server.cli("data", "stage", "ds:to-stage", "--node", "node3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1/1 keys held" in r.stdout
    assert dc.holds("node3", "ds:to-stage")
    r = dc.server.cli("data", "stage", "ds:nowhere", "--node", "node3")
    assert r.returncode == 1 and "0/1 keys held" in r.stdout
    r = dc.server.cli("data", "stage", "ds:to-stage", "--node", "node9")
    assert r.returncode == 4 and "node9" in r.stderr


def caches(dc: DataCluster) -> dict[str, dict[str, Any]]:
    r = dc.server.cli("data", "status", "--json")
    assert r.returncode == 0, r.stderr
    return {c["instance"]: c for c in json.loads(r.stdout)["caches"]}


def test_cache_hits_misses_and_bytes_moved_reach_status_and_metrics(dc: DataCluster) -> None:
    """node1 reads a key written at the root twice: its first GET misses and pulls the
    value through b1 (a miss there too) from the root (a hit); its second GET hits. The
    nodes' heartbeats carry the counters to the control plane, the server reads them
    from there: ``hal data status`` and ``/metrics`` (which promtool accepts) show them."""
    size = 2 * MB
    dc.put("root", "ds:counted", size)
    wait_until(lambda: {"root", "b1", "node1"} <= set(caches(dc)), 30,
               message="every node's counters to reach the server")  # fmt: skip
    before = caches(dc)
    for _ in range(2):
        assert dc.cache["node1"].client().get("ds:counted") == b"x" * size

    def grown(name: str, field: str, by: int, source: str | None = None) -> bool:
        def value(c: dict[str, Any]) -> int:
            return int(c[field][source] if source else c[field])

        return value(caches(dc)[name]) - value(before[name]) >= by

    wait_until(
        lambda: grown("node1", "hits", 1) and grown("node1", "misses", 1)
        and grown("node1", "bytes_moved", size, "parent") and grown("b1", "misses", 1)
        and grown("b1", "bytes_moved", size, "parent") and grown("root", "hits", 1)
        and grown("root", "bytes_served", size),
        30, message="the reads to show in hal data status",
    )  # fmt: skip
    after = caches(dc)
    assert after["node1"]["bytes_served"] - before["node1"]["bytes_served"] >= 2 * size
    assert after["node1"]["hit_ratio"] is not None and 0 < after["node1"]["hit_ratio"] < 1

    text = dc.server.cli("data", "status").stdout
    header = next(line for line in text.splitlines() if line.startswith("CACHE"))
    assert header.split() == ["CACHE", "TIER", "HITS", "MISSES", "HIT%", "SERVED", "FROM",
                              "PARENT", "FROM", "PEER"]  # fmt: skip
    row = next(line.split() for line in text.splitlines() if line.startswith("node1 "))
    assert row[1:4] == ["leaf", str(after["node1"]["hits"]), str(after["node1"]["misses"])]

    metrics = http.get(dc.server.url + "/metrics", timeout=10).text
    assert f'hal_cache_hits_total{{instance="node1",tier="leaf"}} {after["node1"]["hits"]}' in (
        metrics.replace(".0\n", "\n")
    )
    assert 'hal_cache_bytes_moved_total{instance="b1",source="parent",tier="branch"}' in metrics
    assert 'hal_cache_misses_total{instance="node1",result="pulled",tier="leaf"}' in metrics
    if shutil.which("promtool") is None:
        pytest.skip("promtool not installed (Debian package 'prometheus')")
    done = subprocess.run(["promtool", "check", "metrics"], input=metrics, text=True,
                          capture_output=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_jobs_still_schedule_while_the_cache_control_plane_is_down(dc: DataCluster) -> None:
    """Runs last: it kills the control plane for good."""
    dc.cp.kill()
    with dc.server.client() as c:
        jids = [c.submit(job("ds:at-node2", "ds:never-seen")).job_id for _ in range(2)]
        wait_until(lambda: all(finished(c, j) for j in jids), 60, message="the jobs to finish")
        assert [c.job(j).state for j in jids] == ["COMPLETED", "COMPLETED"]
    wait_until(
        lambda: '"stale": true' in dc.server.cli("data", "status", "--json").stdout, 30,
        message="the data view to be reported stale",
    )  # fmt: skip
    r = dc.server.cli("data", "locate", "ds:at-node2")
    assert r.returncode == 0 and "did not answer" in r.stdout
