"""What rebuilding fair share from the accounting history costs a starting server: the
priority service charges every run that ended within the usage window (40 decay
half-lives) before the server answers. Fills a fresh SQLite database in a temporary
folder with N finished jobs (one a second, eight users, each with its own name and
working directory, on one node of 4 CPUs), then times ``PriorityService.start``.

    PYTHONPATH=src python bench/priority_start.py [N]

Prints the seconds and the usage rebuilt (a check that two trees agree) as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Allocation, Job, JobSpec
from hal.core.priority import Account, PriorityPolicy, UserAccount
from hal.core.resources import ResourceVector
from hal.core.states import JobState
from hal.server.priority import PriorityService
from hal.state.cluster import Cluster
from hal.state.store import SqlStateStore

CHUNK = 20_000
USERS = [f"user{u}" for u in range(8)]
POLICY = PriorityPolicy(
    enabled=True,
    accounts=(Account("a"), Account("b")),
    users=tuple(UserAccount(u, "a" if i % 2 else "b", default=True) for i, u in enumerate(USERS)),
)


def fill(store: SqlStateStore, n: int) -> float:
    """N finished jobs, ending one a second up to the returned "now"."""
    with store.transaction() as tx:
        tx.reserve_job_ids(n)
        tx.insert_scripts([(1, "#!/bin/sh\ntrue\n")])
    alloc = Allocation(("n1",), (ResourceVector(4, 1 << 30),))
    for first in range(1, n + 1, CHUNK):
        ids = range(first, min(first + CHUNK, n + 1))
        jobs = [
            Job(id=i, spec=JobSpec(user=USERS[i % 8], script="", name=f"job{i}",
                                   workdir=f"/home/{USERS[i % 8]}/run{i}"),
                partition="p", state=JobState.COMPLETED, submit_time=float(i),
                start_time=float(i), end_time=float(i) + 60.0, allocation=alloc)
            for i in ids
        ]  # fmt: skip
        with store.transaction() as tx:
            tx.insert_jobs(jobs, [1] * len(jobs))
    return float(n) + 60.0


async def start(db: str, now: float) -> tuple[float, float]:
    cluster = Cluster(SqlStateStore(db), HalConfig(), VirtualClock(now))
    await cluster.load()
    service = PriorityService(cluster, POLICY)
    began = time.perf_counter()
    await service.start()
    took = time.perf_counter() - began
    usage = sum(service.usage(now).values())
    await cluster.close()
    return took, usage


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        db = f"sqlite:///{Path(tmp) / 'hal.db'}"
        store = SqlStateStore(db)
        store.migrate()
        now = fill(store, n)
        store.close()
        took, usage = asyncio.run(start(db, now))
    print(json.dumps({"jobs": n, "priority_start_s": round(took, 3), "usage": round(usage, 1)}))


if __name__ == "__main__":
    main()
