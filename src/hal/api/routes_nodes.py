"""``/v1/nodes``, ``/v1/partitions``, ``/v1/topology``, ``/v1/licenses``, ``/v1/config``,
``/v1/reconfigure``, ``/v1/users``."""

from __future__ import annotations

import os
import re
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from hal import __version__
from hal.api.cloud_nodes import cloud_nodes, cloud_of, node_list_json, one_node
from hal.api.convert import node_info, partition_info, topology_info
from hal.api.deps import admin_dep, caller_dep, services_dep
from hal.core.errors import Conflict, InvalidRequest, NotFound
from hal.core.job import licenses_held
from hal.core.node import Node
from hal.core.power import phase_of
from hal.server.auth import new_token, token_hash
from hal.server.priority import weights_info
from hal.server.services import Services
from hal.slurm.syntax import compress_hostlist, expand_hostlist
from hal.state import agents, users
from hal.state.cluster import Caller
from hal.state.node_reasons import server_user
from hal.wire.nodes import (
    ClusterConfig,
    LicenseInfo,
    LicenseList,
    NodeInfo,
    NodeList,
    NodeUpdate,
    PartitionList,
    Reconfigured,
    TopologyInfo,
    UserCreated,
    UserInfo,
)

router = APIRouter(prefix="/v1", tags=["cluster"])
Ctx = Annotated[Services, Depends(services_dep)]
Who = Annotated[Caller, Depends(caller_dep)]
Admin = Annotated[Caller, Depends(admin_dep)]


@router.get("/nodes", response_model=NodeList)
async def list_nodes(request: Request, ctx: Ctx, _caller: Who) -> Response:
    """The registered nodes and the ``[cloud]`` groups' nodes not created yet, each with
    Slurm's flags (``CLOUD``, ``POWERED_DOWN`` ...; ``hal.api.cloud_nodes``)."""
    body = node_list_json(ctx.cluster, cloud_nodes(cloud_of(request)))
    return Response(body, media_type="application/json")


@router.get("/nodes/{name}", response_model=NodeInfo)
async def show_node(name: str, request: Request, ctx: Ctx, _caller: Who) -> NodeInfo:
    info = one_node(name, ctx.cluster, cloud_nodes(cloud_of(request)))
    if info is None:
        raise NotFound(f"Invalid node name specified: {name}")
    return info


@router.patch("/nodes/{name}", response_model=NodeInfo)
async def update_node(
    name: str, body: NodeUpdate, request: Request, ctx: Ctx, admin: Admin
) -> NodeInfo:
    cloud = cloud_nodes(cloud_of(request))
    if name not in ctx.cluster.nodes and name in cloud.groups:
        raise Conflict(
            f"node {name} of cloud group {cloud.groups[name].name} has not joined yet (the "
            "autoscaler makes it when a job needs it): HAL sets the state of joined nodes "
            "only; drain it once it shows in `hal nodes` without ~ or #"
        )
    node = await _set_state(ctx, name, body, admin.name)
    return node_info(node, ctx.cluster, cloud)


async def _set_state(ctx: Services, name: str, body: NodeUpdate, user: str) -> Node:
    """The operator's state; POWER_DOWN and POWER_UP (and RESUME of a sleeping node) go
    to power saving (``hal.server.power``)."""
    power = ctx.power
    node = ctx.cluster.nodes.get(name)
    # (without [power] any more, a sleeping node is resumed as any drained one)
    asleep = node is not None and phase_of(node) is not None
    woken = body.state in ("RESUME", "UP") and asleep and power is not None and power.config.enabled
    if body.state in ("POWER_DOWN", "POWER_UP") or woken:
        if power is None:
            raise InvalidRequest("this server has no power saving", field="state")
        if body.state == "POWER_DOWN":
            return await power.power_down(name, user)
        return await power.power_up(name, user)
    return await agents.set_node_state(ctx.cluster, name, body.state, body.reason, user=user)


@router.get("/partitions", response_model=PartitionList)
async def list_partitions(request: Request, ctx: Ctx, _caller: Who) -> PartitionList:
    c = ctx.cluster
    cloud = cloud_nodes(cloud_of(request))
    return PartitionList(
        partitions=[
            partition_info(p, c, ctx.config.preemption, cloud) for p in c.partitions.values()
        ]
    )


@router.get("/topology", response_model=TopologyInfo)
async def show_topology(ctx: Ctx, _caller: Who) -> TopologyInfo:
    """The switch tree from the config, with free/total nodes per switch."""
    return topology_info(ctx.cluster)


@router.get("/licenses", response_model=LicenseList)
async def list_licenses(ctx: Ctx, _caller: Who) -> LicenseList:
    """The cluster's licenses (``[licenses]``; ``scontrol show licenses``): how many the
    running jobs hold and how many are free."""
    used = licenses_held(ctx.cluster.unfinished.values())
    return LicenseList(
        licenses=[
            LicenseInfo(name=name, total=total, used=used[name], free=max(0, total - used[name]))
            for name, total in sorted(ctx.config.licenses.items())
        ]
    )


@router.get("/config", response_model=ClusterConfig)
async def show_config(request: Request, ctx: Ctx, _caller: Who) -> ClusterConfig:
    """What ``scontrol show config`` prints (``hal.compat.scontrol_config``)."""
    cfg = ctx.config
    prio = cfg.priority
    data_dir = ctx.data_dir
    observe = ctx.observe
    return ClusterConfig(
        cluster_name=cfg.cluster_name,
        min_job_age_seconds=cfg.min_job_age_seconds,
        kill_wait_seconds=cfg.kill_wait_seconds,
        version=__version__,
        scheduler_interval_seconds=cfg.scheduler_interval_seconds,
        settings={
            "MaxArraySize": str(cfg.max_array_size),
            # the account the server runs as (the user of its own node reasons), with
            # its uid as Slurm prints it: root(0)
            "SlurmUser": f"{server_user()}({os.geteuid()})",
            # slurmdbd.conf's names and spelling ("90days", "12months"); NONE: kept forever
            "PurgeEventAfter": str(cfg.accounting.purge_events_after or "NONE"),
            "PurgeJobAfter": str(cfg.accounting.purge_jobs_after or "NONE"),
            "MailProg": cfg.mail.prog,
            "MailDomain": cfg.mail.domain or "(null)",
            "SchedulerParameters": _scheduler_parameters(ctx),
        },
        node_timeout_seconds=cfg.node_timeout_seconds,
        return_to_service=cfg.return_to_service,
        priority=None if not prio.enabled else weights_info(prio),
        preempt_type=cfg.preemption.type.value,
        preempt_mode=cfg.preemption.mode.value,
        preempt_exempt_seconds=cfg.preemption.exempt_time_s,
        backfill=getattr(ctx.scheduler, "backfill_interval_s", None) is not None,
        enable_user_top=cfg.enable_user_top,
        licenses=dict(cfg.licenses),
        state_save_location=str(data_dir or ""),
        boot_time=getattr(observe, "started_at", None) or None,
    )


def _scheduler_parameters(ctx: Services) -> str:
    """Slurm's SchedulerParameters for what the server honours of them: its passes'
    bounds (ADR 0029) and, with a backfill stage, bf_interval and bf_yield_interval
    (Slurm's in microseconds)."""
    cfg = ctx.config
    words = ["enable_user_top"] if cfg.enable_user_top else []
    words += [
        f"default_queue_depth={cfg.scheduler_default_queue_depth}",
        f"sched_interval={cfg.scheduler_sched_interval_s:g}",
        f"sched_max_job_start={cfg.scheduler_max_job_starts}",
    ]
    interval = ctx.scheduler.backfill_interval_s
    if interval is not None:
        words.append(f"bf_interval={interval:g}")
        slice_s = ctx.scheduler.forecast_slice_s or 0.0
        words.append(f"bf_yield_interval={round(slice_s * 1_000_000)}")
    return ",".join(words)


@router.post("/reconfigure", response_model=Reconfigured)
async def reconfigure(ctx: Ctx, admin: Admin) -> Reconfigured:
    """``scontrol reconfigure``: the server re-reads the hal.toml it started with and
    takes what may change while it runs (docs/adr/0014-reconfigure.md); a file with a
    mistake is refused (400) with the error a start would print, a partition still in
    use (409), both changing nothing."""
    if ctx.reconfigure is None:
        raise Conflict("this control plane cannot re-read its configuration")
    return await ctx.reconfigure(admin.name)


USER_NAME = r"^[a-z_][a-z0-9_.-]{0,63}$"


def _user_name(name: str) -> str:
    if re.fullmatch(USER_NAME, name) is None:
        raise PydanticCustomError(
            "user_name",
            "'{name}' is not a user name: use lowercase letters, digits, '_', '.' and '-', "
            "starting with a letter or '_', at most 64 characters (e.g. alice)",
            # a lone surrogate (JSON's "\\ud800") escaped: the message is encoded as UTF-8
            {"name": name.encode("utf-8", "backslashreplace").decode()},
        )
    return name


class NewUser(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt "admin" is refused, not ignored
    name: Annotated[str, AfterValidator(_user_name)] = Field(
        json_schema_extra={"pattern": USER_NAME}
    )
    admin: bool = False
    # an agent's token: accepted by /v1/agent only (docs/admin/security.md), for the nodes of
    # the host list ``nodes`` ("" for any node)
    agent: bool = False
    nodes: str = Field(default="", max_length=4096)


def _agent_nodes(body: NewUser) -> str:
    """``body.nodes`` checked and written as sinfo would (``n[1-3]``)."""
    if body.agent and body.admin:
        raise InvalidRequest(
            "a user is an administrator or an agent, not both: leave out --admin or --agent",
            field="agent",
        )
    if not body.nodes.strip():
        return ""
    if not body.agent:
        raise InvalidRequest(
            "--nodes binds an agent token to nodes: add --agent, or leave out --nodes",
            field="nodes",
        )
    return compress_hostlist(expand_hostlist(body.nodes, field="nodes"))


@router.get("/users/me", response_model=UserInfo)
async def whoami(caller: Who) -> UserInfo:
    return UserInfo(name=caller.name, admin=caller.admin)


@router.get("/users")
async def list_users(ctx: Ctx, _admin: Admin) -> dict[str, list[UserInfo]]:
    rows = await ctx.cluster.db(ctx.cluster.store.users)
    return {
        "users": [
            UserInfo(name=u.name, admin=u.admin, agent=u.agent, nodes=u.agent_nodes) for u in rows
        ]
    }


@router.post("/users", status_code=201, response_model=UserCreated)
async def add_user(body: NewUser, ctx: Ctx, admin: Admin) -> UserCreated:
    nodes = _agent_nodes(body)
    token = new_token()
    existing = {u.name for u in await ctx.cluster.db(ctx.cluster.store.users)}
    if body.name in existing:
        raise Conflict(
            f"user {body.name} exists (`hal user list` lists users); pick another name, "
            f"or give it a new token with `hal user token {body.name}`"
        )
    await users.add(
        ctx.cluster, admin.name, body.name, token_hash(token), body.admin, body.agent, nodes
    )
    return UserCreated(name=body.name, admin=body.admin, token=token, agent=body.agent, nodes=nodes)


@router.post("/users/{name}/token", response_model=UserCreated)
async def replace_token(name: str, ctx: Ctx, caller: Admin) -> UserCreated:
    """A new token for an existing user (``hal user token NAME``), shown once; the old one
    is refused from the next request on.

    Tokens seen before are answered from this server's memory (``TokenCache``, no TTL),
    so the route makes that cache forget the user's tokens after the commit. HAL runs one
    API server; several API servers on one database (not built, docs/adr/0003) would each
    keep answering the old token until told to forget it."""
    user = {u.name: u for u in await ctx.cluster.db(ctx.cluster.store.users)}.get(name)
    missing = NotFound(f"no user {name} (`hal user list` lists users; `hal user add` makes one)")
    if user is None:
        raise missing
    token = new_token()
    try:
        await users.replace_token(ctx.cluster, caller.name, user, token_hash(token), missing)
    finally:
        # also when the commit's outcome is unknown: the change may have landed, and
        # forgetting only costs the next request a lookup
        ctx.tokens.forget_user(name)
    return UserCreated(
        name=name, admin=user.admin, token=token, agent=user.agent, nodes=user.agent_nodes
    )


@router.delete("/users/{name}", response_model=UserInfo)
async def delete_user(name: str, ctx: Ctx, admin: Admin) -> UserInfo:
    """Remove a user (``hal user delete NAME``): their token is refused from the next
    request on. Their jobs stay as they are (running jobs run on, accounting keeps them);
    cancel them first if they must stop. An administrator cannot delete themself, so a
    cluster always keeps one."""
    if name == admin.name:
        raise Conflict(f"you are {name}: another administrator may delete this user")
    user = {u.name: u for u in await ctx.cluster.db(ctx.cluster.store.users)}.get(name)
    missing = NotFound(f"no user {name} (`hal user list` lists users)")
    if user is None:
        raise missing
    try:
        await users.delete(ctx.cluster, admin.name, user, missing)
    finally:
        ctx.tokens.forget_user(name)  # as in replace_token
    return UserInfo(name=name, admin=user.admin, agent=user.agent, nodes=user.agent_nodes)
