"""The server's in-memory mirror (``hal.state.cluster.Cluster``) over a state store, with one
node ``n1`` (2 CPUs, 4 GiB) whose agent session collects what would be sent to it; no
agents, no scheduler. For tests of ``hal.state`` (import it explicitly: it is not part of
``hal.testing``'s core-only surface).

The store is a ``MemoryStateStore`` where the test needs no database (it passes the same
conformance suite as SQL: ``hal.testing.store_conformance``), or SQLite by URL where it
needs what only SQL holds (crontabs, artifacts, retention) or checks the SQL rows
themselves."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Job
from hal.state.agents import AgentSession
from hal.state.cluster import Cluster
from hal.state.store import EventRow, SqlStateStore
from hal.state.store_protocol import StateStore
from hal.testing.builders import make_node
from hal.wire.agent import Signal


def new_cluster(db: str | StateStore, clock: VirtualClock) -> Cluster:
    """A loaded mirror over ``db``: a database URL (a fresh or an existing database), or a
    store (a ``MemoryStateStore``; the same one again: a server restart over it)."""
    store = SqlStateStore(db) if isinstance(db, str) else db
    cluster = Cluster(store, HalConfig(cluster_name="test"), clock)
    asyncio.run(cluster.load())
    cluster.nodes["n1"] = make_node("n1").cpus(2).mem_gib(4).build()
    cluster.agent_sessions["n1"] = AgentSession("n1")
    return cluster


def store(cluster: Cluster, *jobs: Job) -> None:
    """Write ``jobs`` to the store and the mirror, as if submitted and started."""
    with cluster.store.transaction() as tx:
        tx.insert_scripts([(j.id, j.spec.script) for j in jobs])
        tx.insert_jobs(jobs, [j.id for j in jobs])
    for job in jobs:
        cluster.put(job)


async def commit(cluster: Cluster, jobs: Sequence[Job], events: Sequence[EventRow] = ()) -> None:
    """Write ``jobs`` and ``events`` through the cluster's change handle, as its writers do."""
    async with cluster.change() as change:
        await change.commit(jobs, events)


def signals(cluster: Cluster, job_id: int) -> list[int]:
    """The signals queued for ``job_id`` on ``n1``'s agent, in order."""
    out = cluster.agent_sessions["n1"].outbox
    return [i.signal for i in out if isinstance(i, Signal) and i.job_id == job_id]


def counted(cluster: Cluster) -> list[int]:
    """The number of store transactions ``cluster`` opens from now on, as a one-item list
    that grows."""
    count = [0]
    opened = cluster.store.transaction

    def transaction() -> Any:
        count[0] += 1
        return opened()

    cluster.store.transaction = transaction  # type: ignore[method-assign]
    return count


def intercept(cluster: Cluster, method: str, before: Callable[..., None]) -> None:
    """Every store transaction ``cluster`` opens from now on calls ``before`` with the
    arguments of its ``method`` (``"update_jobs"``, ``"upsert_node"`` ...) first; ``before``
    raising refuses the write, as a database refusing a row."""
    opened = cluster.store.transaction

    class Intercepted:
        def __init__(self, tx: Any) -> None:
            self.tx = tx

        def __getattr__(self, name: str) -> Any:
            found = getattr(self.tx, name)
            if name != method:
                return found

            def call(*args: Any, **kwargs: Any) -> Any:
                before(*args, **kwargs)
                return found(*args, **kwargs)

            return call

    @contextmanager
    def transaction() -> Iterator[Any]:
        with opened() as tx:
            yield Intercepted(tx)

    cluster.store.transaction = transaction  # type: ignore[method-assign]
