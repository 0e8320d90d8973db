"""What GPU device isolation adds to a job's start and end on this host.

For each backend the host has (cgroup v1 with its devices controller; cgroup v2, mounted
here if the host has none mounted), times ``create_group`` + ``collect`` of an empty job
cgroup, as the step supervisor does for every job, without device isolation and with a
job denied 7 GPUs of 8. Needs root. Prints JSON::

    python bench/device_filter.py [--jobs 500]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
import uuid

from hal.agent.isolation import BPF, Isolation, detect_isolation
from hal.core.errors import InvalidRequest

DENIED = (0, 1, 2, 3, 4, 5, 6)  # a one-GPU job on an 8-GPU node


def per_job_us(isolation: Isolation, jobs: int, denied: tuple[int, ...]) -> float:
    start = time.perf_counter()
    for job in range(jobs):
        group = isolation.create_group(job, 0, 0, denied)
        isolation.collect(group, killed_by_sigkill=False)
    return (time.perf_counter() - start) / jobs * 1e6


def pair(isolation: Isolation, jobs: int) -> dict[str, float]:
    plain = Isolation(isolation.kind, isolation.base)
    return {
        "without_us": round(per_job_us(plain, jobs, ()), 1),
        "with_us": round(per_job_us(isolation, jobs, DENIED), 1),
    }


def cgroup2(jobs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as mount:
        subprocess.run(["mount", "-t", "cgroup2", "none", mount], check=True)
        base = os.path.join(mount, f"hal-bench-{uuid.uuid4().hex[:8]}")
        os.mkdir(base)
        try:
            return pair(Isolation("cgroup2", base, BPF), jobs)
        finally:
            os.rmdir(base)
            subprocess.run(["umount", mount], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    jobs = parser.parse_args().jobs
    results: dict[str, object] = {"jobs": jobs, "denied_gpus": len(DENIED)}
    try:
        v1 = detect_isolation("cgroup1", f"bench-{uuid.uuid4().hex[:8]}", "yes")
        results["cgroup1"] = pair(v1, jobs)
        v1.release()
    except InvalidRequest as err:
        results["cgroup1"] = str(err)
    results["cgroup2"] = cgroup2(jobs)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
