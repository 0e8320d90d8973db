"""The account tree, QoS and limits of ``hal bench sched-pass``'s workload.

Issue 3 asks for a realistic mix, limits included, so the benchmark's pass runs the
``limits`` plugin as a server with ``[[qos]]``/``[[accounts]]`` limits does. Scaled by the
cluster (N nodes of 64 CPUs, 8 GPUs on a tenth of them), so that some limits hold jobs
back at every size:

- two organisations under ``root``: ``org0`` capped at 30 % of the CPUs (GrpTRES cpu),
  ``org1`` at 40 % of the GPUs (GrpTRES gres/gpu); the 20 project accounts ``acctNN``
  alternate between them;
- every fifth project account caps its running jobs (GrpJobs N/50), the next one its
  users' running jobs (MaxJobs 3);
- QoS ``normal``: MaxJobsPerUser N/100 (at least 4); QoS ``long`` (jobs of 24 h and
  more): MaxWall 48 h, GrpTRES cpu 15 % of the CPUs, MaxTRESPerJob node 64.

``charged`` charges every job (running ones too) to its user's project account and gives
the long jobs their QoS; the jobs are otherwise those of ``build_workload``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from hal.core.job import Job, JobSpec
from hal.core.priority import Account, PriorityPolicy, Qos, TresLimits

ACCOUNTS = 20
LONG_QOS_FROM_S = 24 * 3600


def build_policy(nodes: int, cpus_per_node: int, gpus_per_node: int) -> PriorityPolicy:
    cpus, gpus = nodes * cpus_per_node, (nodes // 10) * gpus_per_node
    orgs = (
        Account("org0", grp_tres=TresLimits(cpus=int(cpus * 0.30))),
        Account("org1", grp_tres=TresLimits(gpus=max(gpus_per_node, int(gpus * 0.40)))),
    )
    projects = []
    for i in range(ACCOUNTS):
        kind = i % 5
        projects.append(
            Account(
                f"acct{i:02d}",
                parent=f"org{i % 2}",
                grp_jobs=max(5, nodes // 50) if kind == 0 else None,
                max_jobs=3 if kind == 1 else None,
            )
        )
    qos = (
        Qos("normal", max_jobs_per_user=max(4, nodes // 100)),
        Qos(
            "long",
            max_wall_s=48 * 3600,
            grp_tres=TresLimits(cpus=int(cpus * 0.15)),
            max_tres_per_job=TresLimits(nodes=64),
        ),
    )
    return PriorityPolicy(accounts=orgs + tuple(projects), qos=qos)


def charged(jobs: Iterable[Job]) -> tuple[Job, ...]:
    """``jobs`` charged to their users' project accounts, the long ones in QoS ``long``.
    Jobs that shared one spec object (an array's elements) share the charged one."""
    specs: dict[int, JobSpec] = {}
    out = []
    for job in jobs:
        spec = specs.get(id(job.spec))
        if spec is None:
            account = f"acct{int(job.spec.user[1:]) % ACCOUNTS:02d}"
            qos = "long" if job.time_limit_s >= LONG_QOS_FROM_S else "normal"
            spec = specs[id(job.spec)] = job.spec.with_changes(account=account, qos=qos)
        out.append(dataclasses.replace(job, spec=spec))
    return tuple(out)
