"""``ServerContext``: what request handlers reach (cluster, config, scheduler, auth)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Header, Request

from hal.api.auth import TokenCache
from hal.api.convert import to_spec
from hal.api.data import DataService, with_view
from hal.api.predictions import PredictionService
from hal.config.model import HalConfig
from hal.core.errors import InvalidRequest, PermissionDenied
from hal.core.job import Job, JobSpec
from hal.core.states import JobState
from hal.scheduler.service import SchedulerService
from hal.state.artifacts import Registry
from hal.state.cluster import Caller, Cluster, array_indices
from hal.state.steps import StepTable
from hal.wire.bounds import INT64_MAX
from hal.wire.jobs import JobSubmit, WillRun
from hal.wire.nodes import Reconfigured

log = logging.getLogger("hal.api")


def _fits_sql(ident: str) -> bool:
    """Whether each number in ``ident`` (``123``, ``123_4``, ``123+1``) fits the
    database's 64-bit integers; what is not a number is left to the caller to refuse."""
    try:
        return all(abs(int(part)) <= INT64_MAX for part in re.split(r"[+_]", ident))
    except ValueError:
        return True


@dataclass(slots=True)
class ServerContext:
    config: HalConfig
    cluster: Cluster
    tokens: TokenCache
    service: SchedulerService
    scheduler: Any  # hal.scheduler.framework.Scheduler (will_run)
    predictions: PredictionService | None = None
    data: DataService | None = None  # [data]: the data plane (hal.api.data)
    # ``scontrol reconfigure`` (``HalServer.reconfigure``; None: an app without a server)
    reconfigure: Callable[[str], Awaitable[Reconfigured]] | None = None
    steps: StepTable = field(init=False)  # job steps (ADR 0012), made from ``cluster``
    # administrators whose token an agent used, each warned about once (``agent_dep``)
    admins_as_agents: set[str] = field(default_factory=set)

    artifacts: Registry = field(init=False)  # published artifacts (docs/user/artifacts.md)

    def __post_init__(self) -> None:
        self.steps = StepTable(self.cluster)
        self.artifacts = Registry(self.cluster)

    def spec_of(self, body: JobSubmit, user: str, where: str = "") -> JobSpec:
        """One submission validated and resolved with this cluster's settings (the
        largest array, ``[data]``'s datasets, ``[mail] domain``); errors name
        ``where + field``."""
        spec = to_spec(
            body,
            user,
            max_array_size=self.config.max_array_size,
            where=where,
            datasets=self.config.datasets,
            mail_domain=self.config.mail.domain,
            element=self.cluster.element_id,
        )
        if spec.artifacts:  # pinned: NAME@VERSION (or the newest) → its content's digest
            spec = spec.with_changes(artifacts=self.artifacts.pin(spec.artifacts, where))
        return spec

    async def submission(
        self, items: Sequence[JobSubmit], caller: Caller, field: str = ""
    ) -> list[JobSpec]:
        """What every user's submission goes through before ``Cluster.submit``, whichever
        API it came by: each item resolved (``spec_of``; with ``field``, errors name
        ``field[i].``), a negative nice refused for non-administrators, and with
        ``[data]`` the inputs located for the first pass."""
        specs = []
        for i, item in enumerate(items):
            where = f"{field}[{i}]." if field else ""
            specs.append(for_caller(self.spec_of(item, caller.name, where), caller, where))
        await self.prime(specs)
        return specs

    async def prime(self, specs: Iterable[JobSpec]) -> None:
        """With ``[data]``: locate the jobs' inputs, so the first pass sees where they are."""
        keys = [k for s in specs for k in s.data]
        if keys and self.data is not None:
            await self.data.prime(keys)

    async def history(
        self,
        ids: Iterable[str],
        users: set[str],
        names: set[str],
        states: set[JobState] | None,
        partitions: set[str],
        start_after: float | None,
        end_before: float | None,
        limit: int,
    ) -> list[Job]:
        plain: list[int] = []
        arrays: list[int] = []
        elements: list[tuple[int, list[range]]] = []  # (array id, indices) asked
        het_parts: dict[int, tuple[int, int]] = {}  # job id → (het job id, offset) asked
        asked = list(ids)
        # an id past 64 bits: no job has it, and the database would fail on it
        fitting = [ident for ident in asked if _fits_sql(ident)]
        if asked and not fitting:
            return []
        for ident in fitting:
            try:
                if "+" in ident:  # ``123+1``: a het job component (consecutive ids)
                    het_id, offset = (int(x) for x in ident.split("+", 1))
                    het_parts[het_id + offset] = (het_id, offset)
                    plain.append(het_id + offset)
                elif "_" in ident:  # ``123_4``, ``123_[1-3]``: as the mirror reads them
                    base, idx = ident.split("_", 1)
                    elements.append((int(base), array_indices(idx)))
                    arrays.append(int(base))
                else:
                    plain.append(int(ident))
                    arrays.append(int(ident))
            except ValueError as err:
                raise InvalidRequest(f"invalid job id {ident!r}", field="job_id") from err
        store = self.cluster.store

        def query(ids: list[int], array_ids: list[int], limit: int | None) -> list[Job]:
            return store.history(
                ids=ids,
                array_ids=array_ids,
                users=sorted(users),
                names=sorted(names),
                states=sorted(s.value for s in states) if states else (),
                partitions=sorted(partitions),
                start_after=start_after,
                end_before=end_before,
                limit=limit,
            )

        # with array elements asked for, the whole arrays are read and the limit counts
        # the elements kept (applied by SQL, it kept the first elements, then dropped
        # them: ``12_3`` with limit 1 found nothing)
        found = await self.cluster.db(query, plain, arrays, None if elements else limit)
        # A job still in memory is shown as memory has it: a pending job's reason and
        # expected start are advisory, kept there and not written per pass, so the stored
        # row would say WaitingForScheduling where squeue says DependencyNeverSatisfied.
        mirror = self.cluster.jobs
        found = [mirror.get(j.id, j) for j in found]
        if het_parts:
            found = [
                j
                for j in found
                if j.id not in het_parts
                or (
                    j.spec.het is not None
                    and het_parts[j.id] == (j.spec.het.job_id, j.spec.het.offset)
                )
            ]
        # ``123`` of a het job: every component (their ids follow component 0's)
        more = [
            i
            for j in found
            if j.spec.het is not None and j.spec.het.offset == 0 and j.id not in het_parts
            for i in range(j.id + 1, j.id + j.spec.het.size)
        ]
        if more:
            seen = {j.id for j in found}
            extra = await self.cluster.db(query, more, [], limit)
            found += [j for j in extra if j.id not in seen and j.spec.het is not None]
            found.sort(key=lambda j: j.id)
        if elements:
            found = [
                j
                for j in found
                if j.id in plain
                or (j.array_job_id in plain)
                or any(
                    j.array_job_id == base
                    and j.array_task_id is not None
                    and any(j.array_task_id in r for r in indices)
                    for base, indices in elements
                )
            ][:limit]
        return found

    async def will_run(self, spec: JobSpec) -> WillRun:
        from hal.scheduler.framework.status import Status

        cluster = self.cluster
        partition, limit, priority = cluster.admit(spec, None)
        now = cluster.clock.now()
        probe = Job(
            id=0,
            spec=spec,
            partition=partition,
            time_limit_s=limit,
            priority=priority,
            submit_time=now,
        )
        result = self.scheduler.will_run(with_view(cluster.snapshot(made=True), self.data), probe)
        if isinstance(result, Status):
            raise InvalidRequest(
                f"Requested node configuration is not available: {result.message or result.reason}",
                field="resources",
            )
        return WillRun(
            job_id=None,
            expected_start=result.start_time,
            nodes=list(result.allocation.nodes),
            partition=result.partition or partition,
        )

    async def will_run_het(self, specs: list[JobSpec]) -> list[WillRun]:
        """``sbatch --test-only`` of a het job: one start for every component."""
        from hal.core.job import HetSpec
        from hal.scheduler.framework.status import Status

        cluster = self.cluster
        now = cluster.clock.now()
        probes = []
        for i, spec in enumerate(specs):
            partition, limit, priority = cluster.admit(spec, i)
            probes.append(
                Job(
                    id=-1 - i,  # probes: ids no stored job has
                    spec=spec.with_changes(het=HetSpec(-1, i, len(specs))),
                    partition=partition,
                    time_limit_s=limit,
                    priority=priority,
                    submit_time=now,
                )
            )
        snap = with_view(cluster.snapshot(made=True), self.data)
        result = self.scheduler.will_run_group(snap, probes)
        if isinstance(result, Status):
            raise InvalidRequest(
                f"Requested node configuration is not available: {result.message or result.reason}",
                field="resources",
            )
        return [
            WillRun(
                job_id=None,
                expected_start=r.start_time,
                nodes=list(r.allocation.nodes),
                partition=p.partition,
            )
            for r, p in zip(result, probes, strict=True)
        ]


def for_caller(spec: JobSpec, caller: Caller, where: str = "") -> JobSpec:
    """``spec`` as ``caller`` may submit it. A negative nice raises a job's priority
    above everyone's: administrators only (as in Slurm, and as for ``scontrol update
    Nice=``). A ``--priority`` is an administrator's to give: Slurm 22.05.8 drops a plain
    user's without a word, the job getting the priority it would have had
    (docs/slurm-checks.md, Session 49), and so does HAL."""
    if spec.nice < 0 and not caller.admin:
        raise PermissionDenied(
            f"{where}nice: only an administrator may give a negative nice (it raises the "
            "job's priority over other users' jobs); use 0 or more"
        )
    if spec.priority is not None and not caller.admin:
        return spec.with_changes(priority=None)
    return spec


# Dependencies are ``async`` on purpose: FastAPI runs plain ``def`` dependencies in a
# thread pool, a thread hop per request that cost the submit path ~1 ms.
async def context_dep(request: Request) -> ServerContext:
    ctx: ServerContext = request.app.state.ctx
    return ctx


# A token seen before is answered from memory; only a new one is looked up in the store,
# on a worker thread.
async def caller_dep(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Caller:
    caller = await authenticated(request, authorization)
    if caller.agent:
        raise PermissionDenied(
            f"{caller.name}'s token is an agent token: only the agent channel (/v1/agent) "
            "accepts it; use a user's token (`hal login`, HAL_TOKEN) for anything else"
        )
    return caller


async def authenticated(request: Request, authorization: str | None) -> Caller:
    """The caller of ``authorization`` (``Bearer <token>``), any kind (agents included);
    refuses a missing or unknown token (``Unauthenticated``)."""
    tokens: TokenCache = request.app.state.ctx.tokens
    known = tokens.known(authorization)
    if known is not None:
        return known
    return await asyncio.to_thread(tokens.caller, authorization)


async def admin_dep(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Caller:
    caller = await caller_dep(request, authorization)  # an agent's token: refused there
    if not caller.admin:
        raise PermissionDenied(f"user {caller.name} is not an administrator")
    return caller


async def agent_dep(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Caller:
    """The agent channel's caller: an agent's token (``hal user add NAME --agent``) or,
    as before agent tokens existed, an administrator's, which still works (logged once
    per administrator: whoever reads a node's token then administers the cluster).
    Handlers check the node they serve with ``check_agent_node``."""
    caller = await authenticated(request, authorization)
    if caller.agent:
        return caller
    if not caller.admin:
        raise PermissionDenied(
            f"user {caller.name} is no agent: the agent channel takes an agent token; "
            "an administrator creates one with `hal user add NAME --agent`"
        )
    ctx: ServerContext = request.app.state.ctx
    if caller.name not in ctx.admins_as_agents:
        ctx.admins_as_agents.add(caller.name)
        log.warning(
            "an agent authenticates with administrator %s's token: whoever can read it on "
            "the node administers the cluster; give agents an agent token "
            "(`hal user add NAME --agent`, docs/admin/security.md)",
            caller.name,
        )
    return caller


def check_agent_node(caller: Caller, node: str) -> None:
    """Refuse an agent token bound to other nodes (``--nodes``) serving ``node``."""
    if caller.agent and caller.agent_nodes is not None and node not in caller.agent_nodes:
        raise PermissionDenied(
            f"agent token {caller.name} may not serve node {node!r}, only its own nodes; "
            f"use that node's agent token, or create one with "
            f"`hal user add NAME --agent --nodes {node}`"
        )
