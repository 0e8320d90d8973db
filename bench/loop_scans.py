"""What the event loop's periodic work and its job listeners cost at a full queue, in CPU
seconds of the loop's thread (so a loaded machine's figures compare): a ``HalServer``
over SQLite, no HTTP, with N nodes of 16 CPUs, R running jobs of one CPU on them and P
pending, put into its mirror as committed. Each line is the least of ``REPEAT`` calls:

- ``grace_check``: the housekeeping's preemption grace check (each second);
- ``utilisation_sample``: the observability tick's sample (every 5 s);
- ``traffic_tick``: the traffic graph's tick (every 5 s);
- ``anomaly_check``: the anomaly detector's check (every 5 s);
- ``metrics_collect``: ``/metrics``' families (each scrape);
- ``listeners_reasons``: every job listener hearing a full pass's new reasons (each
  pending job's new version, as a full pass sends them);
- ``listeners_starts``: every job listener hearing 1,000 more jobs start (a plan's),
  on nodes that already run jobs (new jobs each time).

Prints one JSON object (milliseconds)::

    python bench/loop_scans.py [N [R [P]]]                      # 2500 5000 20000
    PYTHONPATH=/path/to/other/tree/src python bench/loop_scans.py
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hal.api.server import HalServer
from hal.config.model import HalConfig
from hal.core.clock import VirtualClock
from hal.core.job import Job
from hal.core.states import PendingReason
from hal.state import preempt
from hal.testing.builders import make_job, make_node

REPEAT = 5
STARTS = 1000


async def _least(call: Callable[[], Any]) -> float:
    """The least CPU of ``REPEAT`` calls, in ms (a call that returns an awaitable is
    awaited within its time)."""
    best = float("inf")
    for _ in range(REPEAT):
        t = time.thread_time()
        result = call()
        if inspect.isawaitable(result):
            await result
        best = min(best, time.thread_time() - t)
    return round(best * 1000, 2)


def _running(job_id: int, node: str, start: float) -> Job:
    return make_job(job_id).cpus(1).running_on(node, start=start).build()


async def measure(nodes: int, running: int, pending: int) -> dict[str, Any]:
    clock = VirtualClock(1_000_000.0)
    with tempfile.TemporaryDirectory() as tmp:
        server = HalServer(
            HalConfig(cluster_name="bench"),
            f"sqlite:///{Path(tmp) / 'hal.db'}",
            clock,
            data_dir=Path(tmp) / "data",
        )
        cluster = server.cluster
        await cluster.load()
        names = [f"n{i:05d}" for i in range(nodes)]
        for name in names:
            cluster.nodes[name] = make_node(name).cpus(16).build()
        now = clock.now()
        jobs = [_running(i + 1, names[i % nodes], now - 60) for i in range(running)]
        jobs += [make_job(running + i + 1).build() for i in range(pending)]

        def listeners(batch: list[Job]) -> Callable[[], None]:
            def call() -> None:
                for listener in cluster._listeners:
                    listener(batch)

            return call

        for job in jobs:
            cluster.put(job)
        listeners(jobs)()
        waiting = jobs[running:]
        reasons = [
            j.evolve(reason=PendingReason.PRIORITY, expected_start=now + 60 + j.id) for j in waiting
        ]
        plane = server.observe
        first = running + pending + 1

        def starts() -> None:  # (new jobs each time: a job heard starting twice is skipped)
            nonlocal first
            batch = [_running(first + i, names[i % nodes], now) for i in range(STARTS)]
            first += STARTS
            for job in batch:
                cluster.put(job)
            t = time.thread_time()
            listeners(batch)()
            took.append(time.thread_time() - t)

        took: list[float] = []
        for _ in range(REPEAT):
            starts()

        return {
            "nodes": nodes,
            "running": running,
            "pending": pending,
            "grace_check_ms": await _least(lambda: preempt.end_graced(cluster)),
            "utilisation_sample_ms": await _least(lambda: plane.sample(now)),
            "traffic_tick_ms": await _least(server.traffic.tick),
            "anomaly_check_ms": await _least(lambda: plane.anomalies.check(now)),
            "metrics_collect_ms": await _least(lambda: list(plane.metrics.registry.collect())),
            "listeners_reasons_ms": await _least(listeners(reasons)),
            "listeners_starts_ms": round(min(took) * 1000, 2),
        }


def main() -> None:
    args = [int(a) for a in sys.argv[1:]]
    nodes, running, pending = (args + [2500, 5000, 20000][len(args) :])[:3]
    print(json.dumps(asyncio.run(measure(nodes, running, pending))))


if __name__ == "__main__":
    main()
