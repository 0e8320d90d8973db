"""What showing dependencies costs a job listing (``GET /v1/jobs``, squeue): ``job_info``
of every job of a mirror holding N jobs, S of them pending on ``--dependency=singleton``
(a chain of same-named jobs), on a real ``Cluster`` over SQLite, no server. Prints one
JSON object::

    python bench/dependency_listing.py [N [S]]
    PYTHONPATH=/path/to/other/tree/src python bench/dependency_listing.py
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

from hal.api.convert import job_info
from hal.core.clock import VirtualClock
from hal.testing import make_job
from hal.testing.mirror import new_cluster, store


def main(n: int, singletons: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="hal-deps-") as d:
        cluster = new_cluster(f"sqlite:///{d}/hal.db", VirtualClock(1e6))
        jobs = [make_job(i).build() for i in range(1, n - singletons + 1)]
        chain = range(n - singletons + 1, n + 1)
        jobs += [make_job(i).name("chain").depends("singleton").build() for i in chain]
        store(cluster, *jobs)
        listed = list(cluster.jobs.values())
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            for job in listed:
                job_info(job, cluster)
            runs.append(time.perf_counter() - start)
        cluster.store.close()
    return {"jobs": n, "singleton_jobs": singletons, "listing_ms_best": round(min(runs) * 1000)}


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    print(json.dumps(main(*(args + [10_000, 2_000][len(args) :]))))
