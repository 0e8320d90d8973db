"""What the CPU fence (``hal agent --constrain-cores``, Slurm's ConstrainCores) adds to a
job's start and end on this host: ``create_group`` + ``collect`` of an empty job cgroup,
as the step supervisor does for every job, for a job bound to one CPU, without and with
its cpuset. Needs root and a cpuset controller. Prints JSON::

    python bench/cpu_fence.py [--jobs 500] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import time

from hal.agent.isolation import Isolation, detect_isolation


def per_job_us(isolation: Isolation, jobs: int) -> float:
    start = time.perf_counter()
    for job in range(jobs):
        group = isolation.create_group(job, 0, 0, cpus=(0,))
        isolation.collect(group, killed_by_sigkill=False)
    return (time.perf_counter() - start) / jobs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    fenced = detect_isolation("auto", "bench-cpu-fence", cores="yes")
    plain = Isolation(fenced.kind, fenced.base)
    rounds = []
    for _ in range(args.rounds):  # alternating, so drift hits both alike
        rounds.append((per_job_us(plain, args.jobs), per_job_us(fenced, args.jobs)))
    fenced.release()
    without = sorted(r[0] for r in rounds)[len(rounds) // 2]
    with_fence = sorted(r[1] for r in rounds)[len(rounds) // 2]
    print(
        json.dumps(
            {
                "backend": fenced.kind,
                "jobs": args.jobs,
                "without_us_median": round(without, 1),
                "with_fence_us_median": round(with_fence, 1),
                "added_us": round(with_fence - without, 1),
                "rounds": [[round(a, 1), round(b, 1)] for a, b in rounds],
            }
        )
    )


if __name__ == "__main__":
    main()
