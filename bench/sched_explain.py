"""What explaining costs in one scheduling pass: ``Scheduler.run_pass`` on the
``hal bench sched-pass`` workload (10,000 pending jobs on 1,000 nodes), with
``explain=True`` (the server: jobs held behind a blocked queue get their own PreFilter
reason) and ``explain=False`` (the simulator), alternating; median CPU per pass. Also
the CPU of the explaining pass's forecast (``Scheduler.forecast``: the expected starts of the
waiting jobs EASY reserves nothing for, which the server works out after applying the
plan), median per pass.

    PYTHONPATH=src python bench/sched_explain.py [JOBS NODES]
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from hal.bench.sched_pass import build_workload
from hal.scheduler.plugins import build_scheduler


def main() -> None:
    jobs, nodes = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else (10000, 1000)
    workload, scheduler = build_workload(jobs, nodes), build_scheduler()
    for r in range(2):  # warm up
        scheduler.run_pass(workload.snapshot(revision=r + 1), backfill=True)
    cpu: dict[bool, list[float]] = {True: [], False: []}
    forecast: list[float] = []
    forecasts = 0
    revision = 10
    for _ in range(2):
        for explain in (True, False):
            for _ in range(7):
                snap = workload.snapshot(revision=revision)
                revision += 1
                c0 = time.process_time()
                plan = scheduler.run_pass(snap, backfill=True, explain=explain).plan
                cpu[explain].append(time.process_time() - c0)
                if plan.forecasting:
                    c0 = time.process_time()
                    forecasts = len(scheduler.forecast(plan))
                    forecast.append(time.process_time() - c0)
    print(
        json.dumps(
            {
                "benchmark": "sched-explain",
                "jobs": jobs,
                "nodes": nodes,
                "explain_cpu_median_ms": round(statistics.median(cpu[True]) * 1000, 1),
                "no_explain_cpu_median_ms": round(statistics.median(cpu[False]) * 1000, 1),
                "forecast_cpu_median_ms": round(statistics.median(forecast) * 1000, 1),
                "forecast_updates": forecasts,
            }
        )
    )


if __name__ == "__main__":
    main()
