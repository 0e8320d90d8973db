"""``TrafficService``: agents' syncs turned into the graph between running jobs and
between workloads, the scheduler's view of it, the bytes by topology distance, and the
graph kept over a restart (on the memory store; SQLite and PostgreSQL in
tests/integration/state/test_traffic_graph_store.py)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

import pytest

from hal.config.harmonic import HarmonicConfig
from hal.core.clock import VirtualClock
from hal.core.job import Job
from hal.server.traffic import TrafficService, distance
from hal.state.cluster import Cluster
from hal.state.memory_store import MemoryStateStore
from hal.state.rows import TrafficEdgeRow
from hal.testing.builders import make_job, make_node
from hal.testing.mirror import commit, new_cluster, store
from hal.wire.agent import Endpoint, JobFlow, JobTraffic

START = 1_000_000.0


def ep(text: str) -> Endpoint:
    address, _, port = text.rpartition(":")
    return Endpoint(address=address, port=int(port))


def traffic(
    job: int,
    listening: tuple[str, ...] = (),
    flows: tuple[tuple[str, str, int], ...] = (),
    attempt: int = 0,
) -> JobTraffic:
    return JobTraffic(
        job_id=job,
        attempt=attempt,
        interval_seconds=10.0,
        listening=[ep(e) for e in listening],
        flows=[
            JobFlow(local=ep(a), remote=ep(b), bytes_sent=n, bytes_received=0) for a, b, n in flows
        ],
    )


def job(job_id: int, node: str, user: str, name: str, comment: str = "") -> Job:
    built = make_job(job_id).user(user).name(name).running_on(node, start=START).build()
    return dataclasses.replace(built, spec=built.spec.with_changes(comment=comment))


def cluster_of(memory: MemoryStateStore, clock: VirtualClock) -> Cluster:
    """n1, n2 under leaf l1 and n3 under leaf l2 of site s1; n4 in site s2."""
    cluster = new_cluster(memory, clock)
    for name, path, site in (
        ("n1", ("spine", "l1"), "s1"),
        ("n2", ("spine", "l1"), "s1"),
        ("n3", ("spine", "l2"), "s1"),
        ("n4", ("spine2", "l9"), "s2"),
    ):
        cluster.nodes[name] = make_node(name).topology(*path).labels(site=site).build()
    return cluster


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START)


class Store(MemoryStateStore):
    """The memory store, whose traffic-graph writes fail while ``down`` (a full disk)."""

    down = False
    writes_left = -1  # this many more writes succeed, then it is down (-1: no limit)

    def keep_traffic_edges(
        self, rows: Sequence[TrafficEdgeRow], dropped: Sequence[tuple[str, str]]
    ) -> None:
        if self.down or self.writes_left == 0:
            raise OSError("disk full")
        self.writes_left -= 1
        super().keep_traffic_edges(rows, dropped)


@pytest.fixture
def memory() -> Store:
    return Store()


@pytest.fixture
def service(memory: MemoryStateStore, clock: VirtualClock) -> TrafficService:
    cluster = cluster_of(memory, clock)
    store(
        cluster,
        job(1, "n1", "ann", "db"),
        job(2, "n2", "bob", "client"),
        job(3, "n3", "bob", "client"),
        job(4, "n4", "cat", "train", comment="harmonic=llm"),
    )
    found = TrafficService(cluster, HarmonicConfig())
    asyncio.run(found.start())
    return found


def talk(service: TrafficService, client: int, node: str, port: int, nbytes: int) -> None:
    """``client`` on ``node`` sends ``nbytes`` to the database (job 1, 127.0.0.1:5432 on
    n1), which answers with as many: each side reports its own connection."""
    service.received(
        node,
        [traffic(client, flows=((f"127.0.0.1:{port}", "127.0.0.1:5432", nbytes),))],
    )
    service.received(
        "n1",
        [traffic(1, ("127.0.0.1:5432",), (("127.0.0.1:5432", f"127.0.0.1:{port}", nbytes),))],
    )


def test_two_reports_of_one_connection_make_one_edge_counting_each_direction_once(
    service: TrafficService, clock: VirtualClock
) -> None:
    """The client on n2 and the database on n1, local agents sharing 127.0.0.1: both
    directions' bytes, each counted by its sender, over the 10 s measured."""
    talk(service, 2, "n2", 40000, 50_000)
    rate = service.jobs.peers(1, clock.now())
    assert rate == {2: pytest.approx(10_000.0, rel=0.01)}  # 100 kB in 10 s
    assert service.identities.peers("ann/db", clock.now()) == {
        "bob/client": pytest.approx(10_000.0, rel=0.01)
    }
    assert service.stats().bytes_by_distance == {"node": 0, "leaf": 100_000, "switch": 0, "site": 0}


def test_the_database_reporting_first_still_counts_its_bytes_once_the_client_reports(
    service: TrafficService, clock: VirtualClock
) -> None:
    service.received(
        "n1", [traffic(1, ("127.0.0.1:5432",), (("127.0.0.1:5432", "127.0.0.1:40000", 7000),))]
    )
    assert service.jobs.edge_count() == 0 and service.index.pending == 1
    service.received("n2", [traffic(2, flows=(("127.0.0.1:40000", "127.0.0.1:5432", 3000),))])
    assert service.index.pending == 0
    assert service.jobs.peers(2, clock.now()) == {1: pytest.approx(1000.0, rel=0.01)}


def test_jobs_of_one_workload_share_its_edges_and_distances_are_counted_apart(
    service: TrafficService, clock: VirtualClock
) -> None:
    talk(service, 2, "n2", 40000, 1000)  # same leaf
    talk(service, 3, "n3", 40001, 3000)  # across leaves
    assert service.jobs.peers(1, clock.now()) == {
        2: pytest.approx(200.0, rel=0.01),
        3: pytest.approx(600.0, rel=0.01),
    }
    assert service.identities.peers("ann/db", clock.now()) == {
        "bob/client": pytest.approx(800.0, rel=0.01)
    }
    assert service.stats().bytes_by_distance == {
        "node": 0, "leaf": 2000, "switch": 6000, "site": 0
    }  # fmt: skip


def test_a_label_names_the_workload_and_sites_are_their_own_distance(
    service: TrafficService, clock: VirtualClock
) -> None:
    talk(service, 4, "n4", 40000, 500)
    assert set(service.identities.peers("cat/llm", clock.now())) == {"ann/db"}
    assert service.stats().bytes_by_distance["site"] == 1000


def test_reports_of_jobs_not_running_on_the_node_are_ignored(service: TrafficService) -> None:
    """An agent speaks for its own node's jobs only, and for their current run."""
    service.received("n3", [traffic(2, ("127.0.0.1:9",))])  # job 2 runs on n2
    service.received("n2", [traffic(2, ("127.0.0.1:9",), attempt=1)])  # another run
    service.received("n2", [traffic(99, ("127.0.0.1:9",))])  # no such job
    assert service.ignored == 3 and service.index.entries == 0


def test_the_view_holds_workload_rates_both_ways_and_the_jobs_identities(
    service: TrafficService, clock: VirtualClock
) -> None:
    talk(service, 2, "n2", 40000, 50_000)
    assert service.view().between == {}  # as of the last tick
    asyncio.run(service.tick())
    view = service.view()
    assert view.identities[1] == "ann/db" and view.identities[4] == "cat/llm"
    assert view.peers("ann/db") == {"bob/client": pytest.approx(10_000.0, rel=0.01)}
    assert view.peers("bob/client") == {"ann/db": pytest.approx(10_000.0, rel=0.01)}


def test_the_views_rates_are_worked_out_again_at_the_slow_ticks_as_they_decay(
    service: TrafficService, clock: VirtualClock
) -> None:
    """More bytes on a known edge move no edge: the view keeps its rates until the next
    slow tick (every 30 s) works them all out again."""
    talk(service, 2, "n2", 40000, 50_000)
    asyncio.run(service.tick())
    first = service.view().peers("ann/db")["bob/client"]
    clock.advance(3600.0)
    asyncio.run(service.tick())
    assert service.view().peers("ann/db")["bob/client"] == first
    asyncio.run(service.tick(slow=True))
    assert service.view().peers("ann/db")["bob/client"] < first / 2


def test_an_ended_job_leaves_the_job_graph_but_its_workload_keeps_the_edge(
    service: TrafficService, clock: VirtualClock
) -> None:
    talk(service, 2, "n2", 40000, 50_000)
    cluster = service.cluster
    ended = dataclasses.replace(cluster.jobs[2], state=cluster.jobs[2].state.COMPLETED)
    asyncio.run(commit(cluster, [ended]))  # as the server ends it: listeners hear
    asyncio.run(service.tick())
    assert service.jobs.edge_count() == 0
    assert "bob/client" in service.view().peers("ann/db")
    assert 2 not in service.view().identities


def test_the_graph_answers_a_jobs_edges_and_a_users(service: TrafficService) -> None:
    talk(service, 2, "n2", 40000, 1000)
    talk(service, 4, "n4", 40001, 9000)
    found = service.graph(jobs=[service.cluster.jobs[2]])
    assert [(e.a, e.b) for e in found.jobs] == [(2, 1)]
    assert [(e.a, e.b) for e in found.identities] == [("bob/client", "ann/db")]
    found = service.graph(user="ann")
    assert [(e.a, e.b) for e in found.jobs] == [(1, 4), (1, 2)]  # strongest first
    assert [(e.a, e.b) for e in found.identities] == [
        ("ann/db", "cat/llm"),
        ("ann/db", "bob/client"),
    ]
    assert service.graph(user="nobody").jobs == []
    assert len(service.graph(limit=1).jobs) == 1


def test_the_workload_graph_outlives_a_restart_decayed_by_the_time_away(
    service: TrafficService, memory: MemoryStateStore, clock: VirtualClock
) -> None:
    talk(service, 2, "n2", 40000, 50_000)
    before = service.identities.peers("ann/db", clock.now())["bob/client"]
    asyncio.run(service.stop())
    clock.advance(3600.0)  # one half-life away
    again = TrafficService(cluster_of(memory, clock), HarmonicConfig())
    asyncio.run(again.start())
    after = again.view().peers("ann/db")["bob/client"]
    assert 0 < after < before / 2  # decayed, and its window grew
    assert again.jobs.edge_count() == 0  # the job graph is rebuilt from new reports


def test_a_store_that_cannot_write_keeps_the_changes_for_the_next_save(
    service: TrafficService, memory: Store
) -> None:
    talk(service, 2, "n2", 40000, 50_000)
    memory.down = True
    asyncio.run(service.save())
    assert memory.traffic_edges() == []
    memory.down = False
    asyncio.run(service.save())
    assert [(r.a, r.b) for r in memory.traffic_edges()] == [("ann/db", "bob/client")]


def test_a_big_save_goes_in_pieces_and_what_failed_is_stored_next_time(
    service: TrafficService, memory: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("hal.server.traffic.SAVE_CHUNK", 1)
    talk(service, 2, "n2", 40000, 50_000)
    talk(service, 4, "n4", 40001, 50_000)
    memory.writes_left = 1  # the first piece, then the disk is full
    asyncio.run(service.save())
    assert len(memory.traffic_edges()) == 1
    memory.writes_left = -1
    asyncio.run(service.save())
    assert [(r.a, r.b) for r in memory.traffic_edges()] == [
        ("ann/db", "bob/client"),
        ("ann/db", "cat/llm"),
    ]


def test_a_reconfigure_lowering_the_bounds_applies_at_the_next_tick(
    service: TrafficService, clock: VirtualClock
) -> None:
    talk(service, 2, "n2", 40000, 1000)
    talk(service, 4, "n4", 40001, 9000)
    service.configure(HarmonicConfig(half_life_s=60.0, max_peers=1, max_identities=4096))
    asyncio.run(service.tick())
    assert set(service.view().peers("ann/db")) == {"cat/llm"}  # the stronger one stays
    assert service.identities.half_life_s == 60.0


def test_distance_without_topology_is_across_leaves() -> None:
    bare = make_node("x").build()
    assert distance(bare, make_node("y").build()) == "switch"
    assert distance(bare, bare) == "node"
    assert distance(None, bare) == "switch"
