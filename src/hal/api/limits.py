"""``GET /v1/limits``: every QoS and account with limits, and what running jobs hold
against them now, counted the way the scheduler's limits plugin counts them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from hal.core.job import Job
from hal.core.priority import PriorityPolicy, TresLimits
from hal.scheduler.plugins.limits.limits import Limits
from hal.wire.priority import LimitInfo, LimitList, TresInfo


def tres_info(limits: TresLimits) -> TresInfo:
    """A TRES limit as the wire shows it (``/v1/limits``, ``/v1/associations``)."""
    return TresInfo(
        cpus=limits.cpus, gpus=limits.gpus, memory_bytes=limits.mem_bytes, nodes=limits.nodes
    )


def _used(row: list[int] | None) -> TresInfo:
    cpus, gpus, mem, nodes = row or (0, 0, 0, 0)
    return TresInfo(cpus=cpus, gpus=gpus, memory_bytes=mem, nodes=nodes)


def _by_user(jobs: Counter[tuple[str, str]], name: str) -> dict[str, int]:
    return {user: n for (key, user), n in jobs.items() if key == name and n}


def limit_list(policy: PriorityPolicy, running: Iterable[Job]) -> LimitList:
    usage = Limits(policy).usage_of(running)
    rows: list[LimitInfo] = []
    for q in policy.qos:
        if not (q.has_limits or q.max_submit_jobs_per_user is not None):
            continue
        rows.append(
            LimitInfo(
                kind="qos",
                name=q.name,
                max_jobs_per_user=q.max_jobs_per_user,
                max_submit_jobs_per_user=q.max_submit_jobs_per_user,
                grp_jobs=q.grp_jobs,
                grp_tres=tres_info(q.grp_tres),
                max_tres_per_job=tres_info(q.max_tres_per_job),
                max_wall_seconds=q.max_wall_s,
                running_jobs=usage.qos_jobs[q.name],
                used=_used(usage.qos_tres.get(q.name)),
                running_by_user=_by_user(usage.qos_user_jobs, q.name),
            )
        )
    for a in policy.accounts:
        if not (a.has_limits or a.has_submit_limits):
            continue
        rows.append(
            LimitInfo(
                kind="account",
                name=a.name,
                parent=a.parent,
                cohort=a.cohort,
                max_jobs_per_user=a.max_jobs,
                max_submit_jobs_per_user=a.max_submit_jobs,
                grp_submit_jobs=a.grp_submit_jobs,
                grp_jobs=a.grp_jobs,
                grp_tres=tres_info(a.grp_tres),
                max_tres_per_job=tres_info(a.max_tres_per_job),
                max_wall_seconds=a.max_wall_s,
                running_jobs=usage.acct_jobs[a.name],
                used=_used(usage.acct_tres.get(a.name)),
                running_by_user=_by_user(usage.acct_user_jobs, a.name),
            )
        )
    return LimitList(limits=rows)
