"""What a job's profile adds to the agent's usage sample (docs/harmonic.md, Profiles):
N running jobs, each a supervisor-like parent with a shell and a sleeper below it, read
as the agent reads them before each long poll (at most every 2 s, in a worker thread).

    sudo PYTHONPATH=src python bench/profile_sample.py [N]

Per job and sample, in µs: the usage sample alone (``procfs.job_usage``), and the
profile's counters (``profile.read_counters``) read from ``/proc`` only (no cgroup: I/O
from ``/proc/PID/io`` of each process) and, as root on a host that has them, from the
job's cgroups as the agent places it (cgroup1 memory, and cgroup2: the job's own, or a
hybrid host's accounting cgroup, for CPU and pressure). Prints JSON with the CPU model.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable

from hal.agent.procfs import descendants, job_usage
from hal.agent.profile import Counters, read_counters

ROUNDS = 20
REPEATS = 5  # the best of: the host is shared, the least disturbed run is the cost


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def mount_of(fstype: str, option: str = "") -> str:
    """Where the first ``fstype`` hierarchy (with ``option``, a cgroup1 controller) is."""
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if parts[2] == fstype and (not option or option in parts[3].split(",")):
                return parts[1]
    return ""


def folders() -> tuple[str, str]:
    """(cgroup2 folder, cgroup1 memory folder) for the bench's job cgroups, "" for none."""
    if os.geteuid() != 0:
        return "", ""
    v2 = mount_of("cgroup2")
    v1 = mount_of("cgroup", "memory")
    v2 = os.path.join(v2, "hal-bench") if v2 and os.path.exists(f"{v2}/cpu.pressure") else ""
    v1 = os.path.join(v1, "hal-bench") if v1 else ""
    return v2, v1


def per_job_us(n: int, read: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        began = time.perf_counter()
        for _ in range(ROUNDS):
            read()
        best = min(best, (time.perf_counter() - began) / ROUNDS / n)
    return round(best * 1e6, 1)


def start_jobs(groups: list[tuple[str, str]]) -> list[subprocess.Popen[bytes]]:
    """One tree per job, its parent moved into the job's cgroups before it forks."""
    jobs = []
    for pair in groups:
        job = subprocess.Popen(
            ["/bin/sh", "-c", "read go; /bin/sh -c 'sleep 60'; :"], stdin=subprocess.PIPE
        )
        for folder in pair:
            if folder:
                with open(os.path.join(folder, "cgroup.procs"), "w") as f:
                    f.write(str(job.pid))
        assert job.stdin is not None
        job.stdin.write(b"go\n")
        job.stdin.close()
        jobs.append(job)
    return jobs


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    v2, v1 = folders()
    groups: list[tuple[str, str]] = []
    for i in range(n):
        pair = (
            os.path.join(v2, f"job_{i}") if v2 else "",
            os.path.join(v1, f"job_{i}") if v1 else "",
        )
        for folder in pair:
            if folder:
                os.makedirs(folder, exist_ok=True)
        groups.append(pair)
    jobs = start_jobs(groups)
    try:
        time.sleep(1.0)  # let every tree come up
        trees = [[p.pid, *descendants(p.pid)] for p in jobs]
        assert all(len(tree) == 3 for tree in trees), "a tree did not come up"
        used = [job_usage(p.pid) for p in jobs]
        results: dict[str, object] = {"jobs": n, "cpu": cpu_model(), "kernel": platform.release()}
        # what the agent reads already: each tree walked, its processes' stat read
        results["usage_per_job_us"] = per_job_us(
            n, lambda: [job_usage(p.pid, descendants(p.pid)) for p in jobs]
        )

        def profile(with_cgroups: bool) -> list[Counters]:
            return [
                read_counters(
                    time.monotonic(),
                    proc_cpu_seconds=use.cpu_seconds,
                    rss_bytes=use.rss_bytes,
                    pids=tree,
                    cgroup2=g2 if with_cgroups else "",
                    cgroup1_memory=g1 if with_cgroups else "",
                )
                for tree, use, (g2, g1) in zip(trees, used, groups, strict=True)
            ]

        # what the profile adds: its counters, from /proc only or from the cgroups
        results["profile_proc_per_job_us"] = per_job_us(n, lambda: profile(False))
        if v2 or v1:
            results["profile_cgroups_per_job_us"] = per_job_us(n, lambda: profile(True))
            results["cgroups"] = {"cgroup2": bool(v2), "cgroup1_memory": bool(v1)}
            results["source"] = profile(True)[0].source
        print(json.dumps(results))
    finally:
        for p in jobs:
            p.kill()
        for p in jobs:
            p.wait()
        for pair in groups:
            for folder in pair:
                if folder:
                    for _ in range(50):
                        try:
                            os.rmdir(folder)
                            break
                        except OSError:
                            time.sleep(0.02)
        for folder in (v2, v1):
            if folder:
                with contextlib.suppress(OSError):
                    os.rmdir(folder)


if __name__ == "__main__":
    main()
