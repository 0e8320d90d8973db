"""The traffic graph between workloads outlives a server restart on SQLite and on
PostgreSQL: what the agents measured before is what the scheduler reads after, decayed
by the time the server was away; edges dropped meanwhile stay gone."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from hal.config.harmonic import HarmonicConfig
from hal.core.clock import VirtualClock
from hal.server.traffic import TrafficService
from hal.state.cluster import Cluster
from hal.testing.builders import make_job
from hal.testing.mirror import new_cluster, store
from hal.wire.agent import Endpoint, JobFlow, JobTraffic

START = 2_000_000.0


def flow(local: int, remote: int, nbytes: int) -> JobFlow:
    return JobFlow(
        local=Endpoint(address="127.0.0.1", port=local),
        remote=Endpoint(address="127.0.0.1", port=remote),
        bytes_sent=nbytes,
        bytes_received=0,
    )


def report(job: int, flows: list[JobFlow], listening: int | None = None) -> JobTraffic:
    ends = [] if listening is None else [Endpoint(address="127.0.0.1", port=listening)]
    return JobTraffic(job_id=job, attempt=0, interval_seconds=10.0, listening=ends, flows=flows)


def started(
    db_url: str, clock: VirtualClock, config: HarmonicConfig
) -> tuple[Cluster, TrafficService]:
    cluster = new_cluster(db_url, clock)
    service = TrafficService(cluster, config)
    asyncio.run(service.start())
    return cluster, service


def test_the_workload_graph_is_read_back_after_a_restart(db_url: str) -> None:
    clock = VirtualClock(START)
    config = HarmonicConfig(max_peers=1)
    cluster, service = started(db_url, clock, config)
    jobs = [
        make_job(1).user("ann").name("db").running_on("n1", start=START).build(),
        make_job(2).user("bob").name("client").running_on("n1", start=START).build(),
        make_job(3).user("cat").name("etl").running_on("n1", start=START).build(),
    ]
    store(cluster, *jobs)
    service.received("n1", [report(1, [flow(5432, 40000, 40_000)], listening=5432)])
    service.received("n1", [report(2, [flow(40000, 5432, 60_000)])])
    asyncio.run(service.save())
    # a stronger peer takes ann/db's only place (max_peers=1): bob/client's edge is dropped
    service.received("n1", [report(3, [flow(40001, 5432, 10**9)])])
    service.received("n1", [report(1, [flow(5432, 40001, 10**9)], listening=5432)])
    before = service.identities.peers("ann/db", clock.now())
    asyncio.run(service.stop())
    asyncio.run(cluster.close())

    clock.advance(1800.0)
    cluster, again = started(db_url, clock, config)
    try:
        after = again.view().peers("ann/db")
        assert set(after) == set(before) == {"cat/etl"}
        assert after["cat/etl"] == pytest.approx(
            again.identities.edge("ann/db", "cat/etl").rate(clock.now(), 3600.0)  # type: ignore[union-attr]
        )
        assert 0 < after["cat/etl"] < before["cat/etl"]
        stored = cluster.store.traffic_edges()
        assert [(r.a, r.b) for r in stored] == [("ann/db", "cat/etl")]
        assert dataclasses.asdict(stored[0])["since"] == pytest.approx(START - 10.0)
    finally:
        asyncio.run(cluster.close())
