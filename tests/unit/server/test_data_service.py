"""``hal.server.data``: the server's data view built from the cache control plane's answers,
what an outage leaves, locate on submit, the runner that puts the view into snapshots,
and which (job, node) pairs get pre-staged.

The control plane is replaced at its HTTP seam (``httpx.MockTransport``) by a small fake
that answers the contract's shapes; the integration tests (tests/integration/data) run
the real one."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from hal.config.model import DataConfig, HalConfig
from hal.core.clock import VirtualClock
from hal.core.data import Link
from hal.core.job import Allocation, Job
from hal.core.resources import ResourceVector
from hal.core.states import JobState
from hal.scheduler.framework.scheduler import PassResult
from hal.scheduler.framework.snapshot import ClusterSnapshot, PendingUpdate, Placement, Plan
from hal.server.data import DataAwareRunner, DataService
from hal.server.data_view import (
    PRESTAGE_HORIZON_S,
    StageTarget,
    build_view,
    cache_stats_from_instances,
    holders_from_locate,
    stage_targets,
    tree_from_topology,
)
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore
from hal.testing.builders import make_job, make_node

TOPOLOGY = {
    "nodes": [
        {"id": "root", "tier": "root", "status": "active"},
        {"id": "rack1", "tier": "branch", "status": "active"},
        {"id": "n1", "tier": "leaf", "status": "active"},
        {"id": "n2", "tier": "leaf", "status": "active"},
        {"id": "leaf-x", "tier": "leaf", "status": "active"},
    ],
    "edges": [
        {"from": "root", "to": "rack1", "relationship": "parent-child",
         "proximity": {"latencyMs": 2.0, "bandwidthMbps": 10000.0, "cost": 3.0}},
        {"from": "rack1", "to": "n1", "relationship": "parent-child",
         "proximity": {"latencyMs": 0.5, "bandwidthMbps": 25000.0, "cost": 0.5}},
        {"from": "rack1", "to": "n2", "relationship": "parent-child", "proximity": {}},
        {"from": "root", "to": "leaf-x", "relationship": "parent-child"},
    ],
    "rootId": "root",
}  # fmt: skip


class FakeControlPlane:
    """Answers /v1/topology, /v1/instances and /v1/content/locate/{key} from dicts;
    ``down`` makes every request fail to connect, as a dead process would."""

    def __init__(self) -> None:
        self.holders: dict[str, dict[str, int]] = {}
        self.down = False
        self.located: list[str] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.raw_path.decode().split("?")[0]
        if path == "/v1/topology":
            return httpx.Response(200, json=TOPOLOGY)
        if path == "/v1/instances":
            instances = [
                {"id": n["id"], "status": "active", "address": f"127.0.0.1:{7000 + i}"}
                for i, n in enumerate(TOPOLOGY["nodes"])
            ]
            return httpx.Response(200, json={"instances": instances, "total": len(instances)})
        prefix = "/v1/content/locate/"
        if path.startswith(prefix):
            key = unquote(path[len(prefix) :])
            self.located.append(key)
            found = self.holders.get(key, {})
            items = [{"instanceId": i, "size": s} for i, s in found.items()]
            return httpx.Response(200, json={"key": key, "instances": items})
        return httpx.Response(404, json={"code": "not_found", "message": path})


def in_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test in a fresh event loop (fixtures as for a plain test)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(1_000_000.0)


@pytest.fixture
def cluster(tmp_path: Path, clock: VirtualClock) -> Iterator[Cluster]:
    store = SqlStateStore(f"sqlite:///{tmp_path / 'hal.db'}")
    c = Cluster(store, HalConfig(cluster_name="test"), clock)
    c.nodes = {name: make_node(name).build() for name in ("n1", "n2", "n3")}
    yield c
    store.close()


@pytest.fixture
def cp() -> FakeControlPlane:
    return FakeControlPlane()


def service_for(cluster: Cluster, cp: FakeControlPlane, **settings: Any) -> DataService:
    config = DataConfig(cache_url="http://cache-cp:8480", **settings)
    return DataService(config, cluster, transport=httpx.MockTransport(cp.handle))


def publish(cluster: Cluster, *jobs: Job) -> None:
    """What a commit does to the mirror: store the jobs, tell the listeners."""
    for job in jobs:
        cluster.put(job)
    for listener in cluster._listeners:
        listener(jobs)


def test_the_topology_becomes_the_tree_with_each_edge_as_the_childs_uplink() -> None:
    tree = tree_from_topology(TOPOLOGY)
    assert tree.parent == {
        "root": None, "rack1": "root", "n1": "rack1", "n2": "rack1", "leaf-x": "root",
    }  # fmt: skip
    assert tree.uplink["rack1"] == Link(2.0, 10_000.0, 3.0)
    assert tree.uplink["n1"] == Link(0.5, 25_000.0, 0.5)
    assert tree.uplink["n2"] == Link()  # no metrics given: the defaults
    assert tree.path("n1", "root") == Link(2.5, 10_000.0, 3.5)


def test_locate_answers_become_instance_sizes() -> None:
    body = {"key": "k", "instances": [{"instanceId": "n1", "size": 10}, {"instanceId": "x"}]}
    assert holders_from_locate(body) == {"n1": 10, "x": 0}


def test_cache_nodes_counters_come_from_the_instance_list() -> None:
    """Each HAL node's ``halStats`` becomes one row with its hit ratio; an instance
    without them, or with garbage in them, is left out or read as zeros."""
    listed = {
        "instances": [
            {"id": "n1", "tier": "leaf", "status": "active",
             "halStats": {"hits": 3, "misses": 1, "missesNotFound": 1, "bytesServed": 30,
                          "pulls": {"parent": 0}, "bytesPulled": {"parent": 0, "peer": 0},
                          "evictions": 2, "expirations": 0}},
            {"id": "foreign", "tier": "leaf", "status": "active"},
            {"id": "m0", "tier": "root", "status": "inactive",
             "halStats": {"hits": -4, "misses": "x", "bytesPulled": [1]}},
        ],
    }  # fmt: skip
    got = cache_stats_from_instances(listed)
    assert [c["instance"] for c in got] == ["m0", "n1"]
    m0, n1 = got
    assert n1["hits"] == 3 and n1["misses"] == 1 and n1["hit_ratio"] == 0.75
    assert n1["bytes_moved"] == {"parent": 0, "peer": 0} and n1["evictions"] == 2
    assert m0["hits"] == 0 and m0["hit_ratio"] is None and m0["bytes_moved"]["peer"] == 0
    assert m0["status"] == "inactive" and m0["tier"] == "root"


def test_nodes_read_through_the_instance_of_their_name_unless_configured() -> None:
    tree = tree_from_topology(TOPOLOGY)
    view = build_view(tree, {}, {"n3": "leaf-x", "n2": "leaf-x"}, ["n1", "n2", "n3", "n4"])
    # n1: its own instance; n2, n3: configured (the table wins); n4: no instance, no cache
    assert view.node_cache == {"n1": "n1", "n2": "leaf-x", "n3": "leaf-x"}


def test_copies_on_instances_the_topology_no_longer_has_are_dropped() -> None:
    tree = tree_from_topology(TOPOLOGY)
    view = build_view(tree, {"k": {"n1": 5, "gone": 5}}, {}, ["n1"])
    assert view.holders == {"k": {"n1": 5}}


@in_loop
async def test_a_refresh_locates_the_keys_of_pending_jobs_only(
    cluster: Cluster, cp: FakeControlPlane
) -> None:
    cp.holders = {"ds:a": {"n2": 1000}, "ds:b": {"rack1": 50}, "ds:c": {"n1": 7}}
    service = service_for(cluster, cp)
    publish(
        cluster,
        make_job(1).data("ds:a").build(),
        make_job(2).data("ds:b", "ds:a").build(),
        make_job(3).data("ds:c").running_on("n1").build(),  # running: not wanted
        make_job(4).build(),
    )
    await service.start()
    try:
        await service.refresh()
        view = service.view()
        assert dict(view.holders) == {"ds:a": {"n2": 1000}, "ds:b": {"rack1": 50}}
        assert "ds:c" not in cp.located
        assert view.node_cache == {"n1": "n1", "n2": "n2"}
        assert view.transfer(["ds:a"], "n2").local_bytes == 1000
        assert view.transfer(["ds:b"], "n1").moved_bytes == 50
        assert service.status()["stale"] is False
        # job 1 starts, job 2 is cancelled: their keys leave the view on the next refresh
        publish(
            cluster,
            make_job(1).data("ds:a").running_on("n2").build(),
            make_job(2).data("ds:b", "ds:a").state(JobState.CANCELLED).build(),
        )
        await service.refresh()
        assert dict(service.view().holders) == {}
    finally:
        await service.stop()


@in_loop
async def test_an_unreachable_control_plane_leaves_the_last_view_and_is_logged_once(
    cluster: Cluster, cp: FakeControlPlane, clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    cp.holders = {"ds:a": {"n2": 1000}}
    service = service_for(cluster, cp)
    publish(cluster, make_job(1).data("ds:a").build())
    await service.start()
    try:
        await service.refresh()
        before = service.view()
        cp.down = True
        clock.advance(30)
        with caplog.at_level(logging.WARNING, logger="hal.data"):
            await service.refresh()
            await service.refresh()
        assert service.view().holders == before.holders
        assert service.view().node_cache == before.node_cache
        status = service.status()
        assert status["stale"] is True and "ConnectError" in status["last_error"]
        assert status["view_age_seconds"] == 30
        assert service.status()["view_age_seconds"] == 30
        assert len([r for r in caplog.records if "unreachable" in r.message]) == 1
        cp.down = False
        await service.refresh()
        assert service.status()["stale"] is False and service.view_age() == 0
    finally:
        await service.stop()


@in_loop
async def test_locate_on_submit_adds_new_keys_to_the_view_and_skips_a_dead_plane(
    cluster: Cluster, cp: FakeControlPlane
) -> None:
    cp.holders = {"ds:new": {"n1": 42}}
    service = service_for(cluster, cp)
    await service.start()
    try:
        await service.refresh()
        await service.prime(["ds:new"])
        assert service.view().holders["ds:new"] == {"n1": 42}
        located = len(cp.located)
        await service.prime(["ds:new"])  # known already: no request
        assert len(cp.located) == located
        # kept by the next refresh although no pending job names it yet
        await service.refresh()
        assert "ds:new" in service.view().holders
        cp.down = True
        await service.refresh()
        cp.down = False  # up again, but the service does not know before its next refresh
        await service.prime(["ds:other"])
        assert "ds:other" not in cp.located
    finally:
        await service.stop()


@in_loop
async def test_locate_estimates_each_node_and_falls_back_to_the_last_view(
    cluster: Cluster, cp: FakeControlPlane
) -> None:
    cp.holders = {"ds:a": {"rack1": 2_000_000}}
    service = service_for(cluster, cp)
    await service.start()
    try:
        await service.refresh()
        found = await service.locate("ds:a")
        assert found.fresh and found.size == 2_000_000
        assert dict(found.holders) == {"rack1": 2_000_000}
        by_node = {e.node: e for e in found.nodes}
        assert by_node["n1"].cache == "n1" and by_node["n1"].source == "rack1"
        assert by_node["n1"].transfer.moved_bytes == 2_000_000
        assert by_node["n3"].cache is None and by_node["n3"].source is None  # the origin
        cp.down = True
        again = await service.locate("ds:a")
        assert not again.fresh and dict(again.holders) == {"rack1": 2_000_000}
    finally:
        await service.stop()


class RecordingRunner:
    """A PassRunner that remembers the snapshot it was given and answers ``result``."""

    def __init__(self, result: PassResult) -> None:
        self.result = result
        self.seen: list[ClusterSnapshot] = []

    def run_pass(self, snapshot: ClusterSnapshot) -> PassResult:
        self.seen.append(snapshot)
        return self.result

    def schedule(self, snapshot: ClusterSnapshot) -> Plan:
        return self.run_pass(snapshot).plan

    def forecast(self, plan: Plan) -> tuple[PendingUpdate, ...]:
        return ()


def _alloc(*nodes: str) -> Allocation:
    return Allocation(nodes=nodes, per_node=tuple(ResourceVector(cpus=1) for _ in nodes))


@in_loop
async def test_the_runner_puts_the_current_view_into_each_snapshot(
    cluster: Cluster, cp: FakeControlPlane
) -> None:
    service = service_for(cluster, cp, prestage=False)
    inner = RecordingRunner(PassResult(plan=Plan(revision=1)))
    runner = DataAwareRunner(inner, service)
    snap = ClusterSnapshot(1, 0.0, (), (), (), ())
    assert runner.schedule(snap) == Plan(revision=1)
    assert inner.seen[0].data is service.view()
    assert snap.data is None  # the state layer's snapshot is not touched


def test_placements_and_near_reservations_are_staged_far_ones_later() -> None:
    now = 1000.0
    result = PassResult(
        plan=Plan(revision=1, placements=(Placement(1, _alloc("n1", "n2")),)),
        reservations={
            2: (now + 60, now + 120, _alloc("n3")),
            3: (now + PRESTAGE_HORIZON_S + 1, now + 9e5, _alloc("n1")),
        },
    )
    assert stage_targets(result, now) == [
        StageTarget(1, "n1"),
        StageTarget(1, "n2"),
        StageTarget(2, "n3", now + 60),
    ]
    # only jobs that name inputs (the service passes its pending jobs with --data)
    assert stage_targets(result, now, with_inputs={2}) == [StageTarget(2, "n3", now + 60)]


@in_loop
async def test_each_job_node_pair_is_staged_once_unless_its_copy_vanished(
    cluster: Cluster, cp: FakeControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The HAL.STAGE wire (``hal_stage``) is replaced; the integration tests run it."""
    cp.holders = {"ds:a": {"rack1": 100}}
    service = service_for(cluster, cp)
    staged: list[tuple[tuple[str, ...], str]] = []

    async def fake_stage(address: str, keys: tuple[str, ...]) -> frozenset[str]:
        node = {"127.0.0.1:7002": "n1", "127.0.0.1:7003": "n2"}[address]
        staged.append((tuple(keys), node))
        cp.holders["ds:a"][node] = 100  # the leaf reports its copy
        return frozenset(keys)

    monkeypatch.setattr(service, "hal_stage", fake_stage)
    publish(cluster, make_job(1).data("ds:a").build(), make_job(2).build())
    await service.start()
    try:
        await service.refresh()

        async def settle() -> None:
            for _ in range(100):
                if not service._queued:
                    return
                await asyncio.sleep(0.01)

        targets = [StageTarget(1, "n1"), StageTarget(2, "n1"), StageTarget(1, "n3")]
        service.enqueue(targets)  # job 2 has no inputs; n3 reads through no cache
        await settle()
        assert staged == [(("ds:a",), "n1")]
        assert service.view().holders["ds:a"]["n1"] == 100  # recorded at once
        assert service.status()["prestage"] == {
            "staged": 1, "partial": 0, "failed": 0, "no_cache": 1,
        }  # fmt: skip
        assert service.status()["bytes_staged"] == 100
        service.enqueue(targets)  # the next pass plans the same: nothing to do
        await service.refresh()
        service.enqueue(targets)
        await settle()
        assert len(staged) == 1
        del cp.holders["ds:a"]["n1"]  # evicted from the leaf before the job started
        await service.refresh()
        service.enqueue(targets)
        await settle()
        assert staged == [(("ds:a",), "n1")] * 2
    finally:
        await service.stop()


@in_loop
async def test_a_failed_staging_is_counted_and_not_retried_at_once(
    cluster: Cluster, cp: FakeControlPlane, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead leaf: the reservation is re-planned every pass, the leaf is not hammered."""
    cp.holders = {"ds:a": {"root": 100}}
    service = service_for(cluster, cp)
    calls: list[str] = []

    async def dead_leaf(address: str, keys: tuple[str, ...]) -> frozenset[str]:
        calls.append(address)
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(service, "hal_stage", dead_leaf)
    publish(cluster, make_job(1).data("ds:a").build())
    await service.start()
    try:
        await service.refresh()
        for _ in range(3):
            service.enqueue([StageTarget(1, "n1", 2e6)])
            for _ in range(100):
                if not service._queued:
                    break
                await asyncio.sleep(0.01)
        assert len(calls) == 1
        assert service.status()["prestage"]["failed"] == 1
    finally:
        await service.stop()


def test_the_server_adds_datalocality_to_the_default_profile_only_with_data(
    tmp_path: Path,
) -> None:
    from hal.api.server import HalServer
    from hal.scheduler.plugins import DATA_WEIGHT

    def weights(config: HalConfig) -> dict[str, float]:
        server = HalServer(config, f"sqlite:///{tmp_path / 'w.db'}")
        try:
            return {p.name: w for p, w in server.scheduler.profile.score}
        finally:
            server.store.close()

    assert "datalocality" not in weights(HalConfig())
    data = DataConfig(cache_url="http://cp:8480")
    assert weights(HalConfig(data=data))["datalocality"] == DATA_WEIGHT
    heavy = DataConfig(cache_url="http://cp:8480", weight=5.0)
    assert weights(HalConfig(data=heavy))["datalocality"] == 5.0


def test_without_a_data_table_the_data_routes_answer_not_configured(tmp_path: Path) -> None:
    """``hal data ...`` against a server with no [data]: 404 ``not_configured``, saying
    what to configure; not a 503, which tells a client to retry and a monitor that the
    server is failing (the fuzzing run, tests/integration/server/fuzz, counts 5xx)."""
    from fastapi.testclient import TestClient

    from hal.api.server import HalServer
    from hal.server.users import ensure_user

    server = HalServer(HalConfig(), f"sqlite:///{tmp_path / 'u.db'}")
    try:
        assert server.data is None
        token = ensure_user(server.store, "admin", admin=True, now=0.0)
        client = TestClient(server.app)  # no lifespan: these routes need no running server
        auth = {"Authorization": f"Bearer {token}"}
        for r in (
            client.get("/v1/data/status", headers=auth),
            client.get("/v1/data/locate/ds:a", headers=auth),
            client.get("/v1/data/locate/dir%2Fshard-1", headers=auth),  # keys may hold "/"
            client.post("/v1/data/stage", headers=auth, json={"keys": ["a"], "node": "n1"}),
        ):
            assert r.status_code == 404 and "[data]" in r.json()["detail"], r.text
            assert r.json()["code"] == "not_configured", r.text
        paths = client.get("/openapi.json").json()["paths"]
        assert {"/v1/data/locate/{key}", "/v1/data/stage", "/v1/data/status"} <= set(paths)
    finally:
        server.store.close()
