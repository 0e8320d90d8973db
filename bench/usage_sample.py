"""What the agent's usage sampling costs (``sstat``): ``procfs.job_usage`` over N running
jobs, each a supervisor-like parent with a shell and a sleeper below it, as the agent
reads them before each long poll (at most every 2 s, in a worker thread).

    PYTHONPATH=src python bench/usage_sample.py [N]

Prints the time of one sample of all N jobs and per job, as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from hal.agent.procfs import job_usage


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    # each "supervisor" is a shell whose child shell runs a sleeper: three processes a job
    jobs = [subprocess.Popen(["/bin/sh", "-c", "/bin/sh -c 'sleep 60'; :"]) for _ in range(n)]
    try:
        time.sleep(1.0)  # let every tree come up
        rounds = 20
        began = time.perf_counter()
        for _ in range(rounds):
            samples = [job_usage(p.pid) for p in jobs]
        per_sample = (time.perf_counter() - began) / rounds
        assert all(rss > 0 for rss, _ in samples), "a tree was not read"
        print(
            json.dumps(
                {
                    "jobs": n,
                    "sample_ms": round(per_sample * 1000, 2),
                    "per_job_us": round(per_sample / n * 1e6, 1),
                }
            )
        )
    finally:
        for p in jobs:
            p.kill()
        for p in jobs:
            p.wait()


if __name__ == "__main__":
    main()
