"""``/v1/priority`` (sprio), ``/v1/priority/top`` (scontrol top), ``/v1/shares``
(sshare), ``/v1/limits``, ``/v1/associations`` (sacctmgr show),
``/v1/jobs/{id}/explain``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from hal.api.associations import association_list
from hal.api.deps import caller_dep, services_dep
from hal.api.limits import limit_list
from hal.api.tres_run import tres_run_minutes
from hal.core.errors import Conflict, NotFound
from hal.core.job import Job
from hal.server.explain import explain, priority_info, share_info
from hal.server.priority import PriorityService, weights_info
from hal.server.services import Services
from hal.state.cluster import Caller
from hal.wire.accounts import AssociationList
from hal.wire.priority import (
    BASIC,
    MULTIFACTOR,
    ExplainInfo,
    LimitList,
    PriorityList,
    ShareList,
)

router = APIRouter(prefix="/v1", tags=["priority"])
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]


async def _service(ctx: Ctx) -> PriorityService:
    found = ctx.priority
    if found is None:
        raise NotFound("this server does not run the priority service")
    return found


Service = Annotated[PriorityService, Depends(_service)]


def _split(text: str | None) -> set[str]:
    return {t.strip() for t in (text or "").split(",") if t.strip()}


@router.get("/priority", response_model=PriorityList)
async def priorities(
    service: Service,
    _caller: Who,
    user: str | None = None,
    id: str | None = None,
    partition: str | None = None,
) -> PriorityList:
    """Every pending job's priority factors (``sprio``), filtered by user, job id
    (plain ids or array ids) and partition."""
    if not service.enabled:
        raise Conflict(
            f"You are not running a supported priority plugin ({BASIC}); add a [priority] "
            f"table to hal.toml for {MULTIFACTOR}"
        )
    users, ids, parts = _split(user), _split(id), _split(partition)

    def wanted(job: Job) -> bool:
        return (
            (not users or job.spec.user in users)
            and (not parts or job.partition in parts)
            and (
                not ids
                or str(job.id) in ids
                or job.display_id in ids
                or str(job.array_job_id) in ids
            )
        )

    rows = [priority_info(p) for p in service.pending(wanted)]
    return PriorityList(plugin=MULTIFACTOR, weights=weights_info(service.policy), jobs=rows)


@router.post("/priority/top")
async def top(ctx: Ctx, caller: Who, jobs: str) -> dict[str, object]:
    """Move the pending jobs ``jobs`` ("12,15") ahead of their owner's other jobs of the
    same partition, account and QoS (``scontrol top``, ``hal.state.job_top``): the ids
    of the jobs whose priority changed."""
    from hal.state.job_top import set_top

    return {"job_ids": await set_top(ctx.cluster, jobs, caller)}


@router.get("/shares", response_model=ShareList)
async def shares(
    service: Service, _caller: Who, user: str | None = None, account: str | None = None
) -> ShareList:
    """The fair-share tree (``sshare``): every account, and the user associations of
    ``user`` (all users when not given), under ``account`` when given."""
    users, accounts = _split(user), _split(account)
    rows = every = service.shares()
    if accounts:
        keep: set[str] = set()
        for row in rows:
            if not row.user and (row.account in accounts or row.parent in keep):
                keep.add(row.account)
        rows = tuple(r for r in rows if r.account in keep)
    if users:
        rows = tuple(r for r in rows if not r.user or r.user in users)
    running = [j for j in service.cluster.unfinished.values() if j.state.is_active]
    tres = tres_run_minutes(
        running,
        {j.id: service.assoc(j) for j in running},
        every,  # the whole tree: an account also sums the users filtered away here
        service.cluster.clock.now(),
        service.policy.usage_gpu_weight,
    )
    return ShareList(
        decay_half_life_seconds=service.policy.decay_half_life_s,
        rows=[share_info(r, tres.get((r.account, r.user))) for r in rows],
    )


@router.get("/limits", response_model=LimitList)
async def limits(service: Service, _caller: Who) -> LimitList:
    """Every QoS and account with limits (MaxJobsPerUser, GrpJobs, GrpTRES, ...) and what
    its running jobs hold against them now."""
    return limit_list(service.policy, service.cluster.unfinished.values())


@router.get("/associations", response_model=AssociationList)
async def associations(ctx: Ctx, _caller: Who) -> AssociationList:
    """The accounts, user associations and QoS of hal.toml (``sacctmgr show``), as the
    server read them at start or at the last ``scontrol reconfigure``; any user may read
    them, as in Slurm without PrivateData."""
    users = await ctx.cluster.db(ctx.cluster.store.users)
    return association_list(ctx.config, {u.name for u in users if u.admin})


@router.get("/jobs/{job_id}/explain", response_model=ExplainInfo)
async def explain_job(job_id: str, ctx: Ctx, _caller: Who) -> ExplainInfo:
    """Why the job is pending: reason, node histogram, queue ahead, priority, fair share
    and expected start."""
    return await explain(ctx, ctx.priority, job_id, ctx.cloud)
