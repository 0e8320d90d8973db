"""What reading a big accounting history costs the state store on SQLite: ``sacct`` for
one user over the last hour, the server's start-up read of the active and recent jobs, and
the prediction service's history pages (the last 50,000 runs, 5,000 a page, as it
replays them at every start). Fills a fresh database in a temporary folder with N
finished jobs (one a second, four users) and a few running ones, then times each read.

    PYTHONPATH=src python bench/store_history.py [N]

Prints the seconds of each read as JSON. Every read runs on the store's one thread, which
every write of the server waits for.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from hal.core.job import Job, JobSpec
from hal.core.states import JobState
from hal.state.store import SqlStateStore

CHUNK = 20_000


def fill(store: SqlStateStore, n: int) -> float:
    """N finished jobs ending one a second up to the returned "now", and 10 running."""
    with store.transaction() as tx:
        tx.reserve_job_ids(n + 10)
        tx.insert_scripts([(1, "#!/bin/sh\ntrue\n")])
    specs = [JobSpec(user=f"user{u}", script="") for u in range(4)]
    done, running = JobState.COMPLETED, JobState.RUNNING
    for first in range(1, n + 1, CHUNK):
        ids = range(first, min(first + CHUNK, n + 1))
        jobs = [
            Job(id=i, spec=specs[i % 4], partition="p", state=done, submit_time=float(i),
                start_time=float(i), end_time=float(i) + 60.0)
            for i in ids
        ]  # fmt: skip
        with store.transaction() as tx:
            tx.insert_jobs(jobs, [1] * len(jobs))
    now = float(n) + 60.0
    active = [
        Job(id=n + k, spec=specs[0], partition="p", state=running, submit_time=now,
            start_time=now)
        for k in range(1, 11)
    ]  # fmt: skip
    with store.transaction() as tx:
        tx.insert_jobs(active, [1] * len(active))
    return now


def timed(read: object) -> float:
    began = time.perf_counter()
    read()  # type: ignore[operator]
    return round(time.perf_counter() - began, 3)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as folder:
        store = SqlStateStore(f"sqlite:///{Path(folder) / 'hal.db'}")
        store.migrate()
        began = time.perf_counter()
        now = fill(store, n)
        filled = round(time.perf_counter() - began, 1)

        def pages() -> None:
            before = None
            for _ in range(10):  # 50,000 runs
                page = store.finished_runs(5_000, before)
                last = page[-1]
                before = (last.end_time or 0.0, last.id)

        result = {
            "jobs": n,
            "fill_s": filled,
            "sacct_user_last_hour_s": timed(
                lambda: store.history(users=["user1"], start_after=now - 3_600)
            ),
            "startup_read_s": timed(lambda: store.load_jobs(active_or_ended_after=now - 300)),
            "predictor_pages_s": timed(pages),
        }
        store.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
