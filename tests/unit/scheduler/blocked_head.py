"""The small scene several scheduler tests share: four 1-CPU nodes, two of them busy
until 1090 (jobs 1 and 2, started at 990 for 100 s); a 4-node head (job 10) blocks, a
50 s job (12) fits now."""

from __future__ import annotations

from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.testing import cluster, make_job


def blocked_head(now: float = 1000.0) -> ClusterSnapshot:
    return (
        cluster(now)
        .uniform_nodes(4, cpus=1)
        .running(
            make_job(1).limit(100).running_on("n0001", start=990),
            make_job(2).limit(100).running_on("n0002", start=990),
        )
        .pending(make_job(10).nodes(4).limit(100), make_job(12).limit(50))
        .build()
    )
