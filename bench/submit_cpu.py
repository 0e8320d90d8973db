"""Control-plane CPU per submission: N held jobs submitted one request at a time to a
``hal up`` cluster (2 agents), with each request's latency and the server process's CPU
time over the loop (from /proc), and this client's own CPU apart. Held jobs never
start, so only the submit path is measured: HTTP, validation, the store transaction and
the scheduling pass each submission triggers.

    PYTHONPATH=src python bench/submit_cpu.py [N]
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time

from hal.bench.e2e import TRUE
from hal.bench.localup import cluster_cpu_seconds, local_cluster
from hal.client.sync import HalClient


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    held = dataclasses.replace(TRUE, hold=True)
    with local_cluster(agents=2, cpus_per_agent=32) as up, HalClient(up.url, up.token) as c:
        for _ in range(20):  # warm up: imports, the store's statement cache
            c.submit(held)
        before = cluster_cpu_seconds(up.pid)["server"]
        latencies = []
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            start = time.perf_counter()
            c.submit(held)
            latencies.append(time.perf_counter() - start)
        wall, client = time.perf_counter() - t0, time.process_time() - c0
        server = cluster_cpu_seconds(up.pid)["server"] - before
    latencies.sort()
    print(
        json.dumps(
            {
                "benchmark": "submit-cpu",
                "submits": n,
                "wall_ms_per_submit": round(wall / n * 1000, 3),
                "latency_p50_ms": round(statistics.median(latencies) * 1000, 3),
                "latency_p90_ms": round(latencies[int(0.9 * (n - 1))] * 1000, 3),
                "server_cpu_ms_per_submit": round(server / n * 1000, 3),
                "client_cpu_ms_per_submit": round(client / n * 1000, 3),
            }
        )
    )


if __name__ == "__main__":
    main()
