"""What the control plane's traffic graph costs (docs/harmonic.md, "Cost"): one agent
sync's 1,000 connections taken in, the scheduler's view of a full workload graph, and
storing and reading a full graph on SQLite (and PostgreSQL on 127.0.0.1:5432 when one
answers). Prints JSON; each time is the best of ``REPEATS`` runs.

    PYTHONPATH=src python bench/traffic_graph.py
"""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import tempfile
import time
import timeit
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hal.config.harmonic import HarmonicConfig
from hal.core.clock import VirtualClock
from hal.server.traffic import TrafficService
from hal.server.traffic_graph import DecayedGraph, rates
from hal.state.memory_store import MemoryStateStore
from hal.state.rows import TrafficEdgeRow
from hal.state.store import SqlStateStore
from hal.testing.builders import make_job, make_node
from hal.testing.mirror import new_cluster, store
from hal.wire.agent import Endpoint, JobFlow, JobTraffic

REPEATS = 5
H = 3600.0


def best(work: Callable[[], object], number: int = 1) -> float:
    return min(timeit.repeat(work, number=number, repeat=REPEATS)) / number


def full_graph() -> tuple[DecayedGraph[str], float]:
    """4,096 workloads with 16 new peers each: the default bounds' 65,536 edges."""
    rng = random.Random(1)
    graph: DecayedGraph[str] = DecayedGraph(H, 32, 4096)
    names = [f"user{i % 200}/work{i}" for i in range(4096)]
    tracemalloc.start()
    for i, a in enumerate(names):
        for k in range(1, 17):
            graph.add(a, names[(i + k * 37) % 4096], rng.uniform(1e3, 1e9), 1000.0, 10.0)
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return graph, size


def intake() -> dict[str, Any]:
    """100 service jobs on n1 and 100 clients on n2, ten connections each, both sides
    reporting over 127.0.0.1 as local agents do."""
    clock = VirtualClock(1e6)
    cluster = new_cluster(MemoryStateStore(), clock)
    for node in ("n1", "n2"):
        cluster.nodes[node] = make_node(node).cpus(1000).build()
    jobs = [
        make_job(j).user("u").name(f"w{j % 20}").running_on("n1" if j <= 100 else "n2").build()
        for j in range(1, 201)
    ]
    store(cluster, *jobs)
    service = TrafficService(cluster, HarmonicConfig())
    asyncio.run(service.start())

    def ep(port: int) -> Endpoint:
        return Endpoint(address="127.0.0.1", port=port)

    def sync(first: int, client: bool) -> list[JobTraffic]:
        found = []
        for j in range(first, first + 100):
            server, flows = 5000 + j % 100, []
            for k in range(10):
                mine = 30000 + (j % 100) * 10 + k
                local, remote = (mine, server) if client else (server, mine)
                flows.append(
                    JobFlow(local=ep(local), remote=ep(remote), bytes_sent=1000, bytes_received=0)
                )
            listening = [] if client else [ep(server)]
            found.append(JobTraffic(job_id=j, attempt=0, interval_seconds=5.0,
                                    listening=listening, flows=flows))  # fmt: skip
        return found

    servers, clients = sync(1, client=False), sync(101, client=True)

    def both() -> None:
        clock.advance(5.0)
        service.received("n1", servers)
        service.received("n2", clients)

    both()
    return {"flows_per_sync": 1000, "sync_seconds": best(both, number=20) / 2}


def database(url: str, rows: list[TrafficEdgeRow]) -> dict[str, float]:
    db = SqlStateStore(url)
    try:
        db.migrate()
        chunks = [rows[i : i + 4096] for i in range(0, len(rows), 4096)]  # as the server
        start = time.perf_counter()
        for chunk in chunks:
            db.keep_traffic_edges(chunk, [])
        first = time.perf_counter() - start

        def again() -> None:
            for chunk in chunks:
                db.keep_traffic_edges(chunk, [])

        return {
            "first_store_seconds": first,
            "store_seconds": best(again),
            "read_seconds": best(db.traffic_edges),
        }
    finally:
        db.close()


def postgres(rows: list[TrafficEdgeRow]) -> dict[str, float] | None:
    try:
        import psycopg

        admin = "host=127.0.0.1 user=postgres dbname=postgres"
        with psycopg.connect(admin, connect_timeout=3, autocommit=True) as conn:
            name = "hal_bench_" + secrets.token_hex(3)
            conn.execute(f'CREATE DATABASE "{name}"')
    except Exception:
        return None
    try:
        return database(f"postgresql://postgres@127.0.0.1:5432/{name}", rows)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    graph, size = full_graph()
    adjacency = graph.adjacency()
    written, _ = graph.changes()
    rows = [TrafficEdgeRow(*edge) for edge in written]
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = database(f"sqlite:///{Path(tmp) / 'hal.db'}", rows)
    result = {
        "intake": intake(),
        "full_graph": {
            "identities": len(graph),
            "edges": graph.edge_count(),
            "memory_bytes": size,
            "view_copy_seconds": best(graph.adjacency),
            "view_rates_seconds": best(lambda: rates(adjacency, 1005.0, H)),
            "prune_seconds": best(lambda: graph.prune(1005.0)),
        },
        "sqlite": sqlite,
        "postgresql": postgres(rows),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
