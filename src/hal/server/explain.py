"""``hal explain JOB``: everything about why a job waits, in one answer.

Put together from what the server already has — the reason and expected start the last
pass gave the job, the queue in front of it, its priority factors and fair-share
standing — plus one read-only dry run of its cycle on the current snapshot
(``hal.scheduler.framework.explain.diagnose``) for the per-plugin node histogram.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable

from hal.core.job import Job
from hal.core.malleable import ACTION
from hal.core.preemption import PREEMPTED_BY
from hal.core.states import JobState, PendingReason
from hal.scheduler.framework import Framework, PassContext, Scheduler
from hal.scheduler.framework.explain import Diagnosis, diagnose
from hal.scheduler.framework.keys import GROUP
from hal.scheduler.framework.snapshot import ClusterSnapshot
from hal.scheduler.plugins.affinity import NAME as AFFINITY
from hal.scheduler.plugins.multifactor import DEFAULT_QOS, ShareRow
from hal.scheduler.plugins.topology import NAME as TOPOLOGY
from hal.server.cloud import CloudService, burst_info
from hal.server.priority import JobPriority, PriorityService
from hal.server.services import Services
from hal.state.agents import LAUNCH_ERROR
from hal.state.cluster import Cluster
from hal.state.job_changes import PLACEMENT_NOTE
from hal.wire.priority import ExplainInfo, FactorValues, JobPriorityInfo, NodeRejection, ShareInfo

AHEAD_SHOWN = 5
_RESERVATION_REASONS = (PendingReason.RESERVATION, PendingReason.RESERVED_FOR_MAINTENANCE)
_DEPENDENCY_REASONS = (PendingReason.DEPENDENCY, PendingReason.DEPENDENCY_NEVER_SATISFIED)


def priority_info(p: JobPriority) -> JobPriorityInfo:
    job, f, w = p.job, p.factors, p.weighted
    return JobPriorityInfo(
        job_id=job.id,
        display_id=job.display_id,
        user=job.spec.user,
        account=p.account,
        partition=job.partition,
        qos=job.spec.qos or DEFAULT_QOS,
        priority=p.priority,
        fixed=job.priority_fixed,
        nice=f.nice,  # the one its priority was calculated with
        weighted=FactorValues(
            site=w.site,
            age=w.age,
            fairshare=w.fairshare,
            job_size=w.job_size,
            partition=w.partition,
            qos=w.qos,
        ),
        normalized=FactorValues(
            site=f.site,
            age=f.age,
            fairshare=f.fairshare,
            job_size=f.job_size,
            partition=f.partition,
            qos=f.qos,
        ),
    )


def share_info(row: ShareRow, tres_run_minutes: dict[str, int] | None = None) -> ShareInfo:
    return ShareInfo(
        account=row.account,
        user=row.user,
        parent=row.parent,
        depth=row.depth,
        raw_shares=row.raw_shares,
        norm_shares=row.norm_shares,
        raw_usage=row.raw_usage,
        norm_usage=row.norm_usage,
        effective_usage=row.effective_usage,
        fairshare=row.fairshare,
        level_fs=row.level_fs,
        tres_run_minutes=tres_run_minutes or {},
    )


def _queue_ahead(scheduler: Scheduler, snap: ClusterSnapshot, job: Job) -> list[Job]:
    """The pending jobs the pass tries before ``job`` in its partition (queue order)."""
    key = scheduler.profile.queue_sort.sort_key
    mine = (key(job), job.id)
    return [
        j
        for j in scheduler.framework.sort(p for p in snap.pending if p.partition == job.partition)
        if j.id != job.id and (key(j), j.id) < mine
    ]


def _dependency_detail(cluster: Cluster, job: Job, conditions: str) -> str:
    """A job held by its dependency (``conditions``: what is left of it, as squeue's
    ``%E`` shows it): the jobs it names and their states, so the user sees what it waits
    for, not the nodes, which are not looked at until the dependency holds."""
    dep = job.spec.dependency
    named: dict[int, str] = {}
    for term in dep.terms if dep is not None else ():
        for target in term.job_ids:
            elements = [] if target in term.elements else cluster.arrays.get(target, [])
            if len(elements) > 1:  # a whole array: its elements' states
                states = Counter(cluster.jobs[e].state.value for e in elements)
                counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
                named[target] = f"array {target} ({counts})"
            else:
                found = cluster.jobs.get(target)
                named[target] = (
                    f"job {found.display_id} {found.state.value}"
                    if found is not None
                    else f"job {target} ended"
                )
    jobs = f": {', '.join(named.values())}" if named else ""
    if job.reason is PendingReason.DEPENDENCY_NEVER_SATISFIED:
        return (
            f"its dependency can never be satisfied ({conditions}{jobs}); cancel it "
            f"(scancel {job.display_id}) or change it (scontrol update JobId={job.display_id} "
            "Dependency=...)"
        )
    return f"waits for its dependency ({conditions}{jobs}); nodes are looked at once it holds"


def _detail(
    job: Job,
    diag: Diagnosis | None,
    ahead: list[Job],
    victims: list[Job],
    cluster: Cluster | None = None,  # where a dependency's jobs are looked up
) -> str:
    if job.state is not JobState.PENDING:
        failed = job.extra.get(LAUNCH_ERROR)
        if failed and job.reason is PendingReason.JOB_LAUNCH_FAILURE:
            return f"job is {job.state.value}, not pending: it never started: {failed}"
        note = job.extra.get(PLACEMENT_NOTE)
        if note:  # where it was started, and why (the traffic graph)
            return f"job is {job.state.value}, not pending; {note}"
        return f"job is {job.state.value}, not pending"
    if victims:
        ids = ", ".join(v.display_id for v in victims)
        return (
            f"job(s) {ids} are being preempted for it; it starts when they have released "
            "their nodes, before any other job"
        )
    reason = job.reason
    if job.held:
        who = "an administrator" if job.held_by_admin else "its owner"
        return f"held by {who}; release it with scontrol release {job.display_id}"
    if diag is not None and diag.stopped_at_pre_filter:
        st = diag.status
        if st.reason in _DEPENDENCY_REASONS and cluster is not None:
            return _dependency_detail(cluster, job, st.message or str(job.spec.dependency))
        return f"{st.reason.value}: {st.message or 'refused by ' + st.plugin}"
    if reason is PendingReason.PRIORITY:
        first = ", ".join(j.display_id for j in ahead[:AHEAD_SHOWN])
        return (
            f"{len(ahead)} job(s) ahead in partition {job.partition} (first: {first}); "
            "it starts when they have started or when backfill finds a hole it fits"
            if ahead
            else f"waiting behind a job of partition {job.partition} that cannot start"
        )
    if diag is not None and not diag.status.is_success:
        reserved = [label for plugin, label, _ in diag.rejections if plugin == "reservation"]
        if reserved or reason in _RESERVATION_REASONS:
            where = "; ".join(reserved) or diag.status.message or reason.value
            return f"advance reservation: {where} ({diag.summary()})"
    if diag is not None and diag.status.plugin == TOPOLOGY and not diag.status.is_success:
        return _topology_detail(diag)
    if diag is not None and diag.status.plugin == AFFINITY and not diag.status.is_success:
        # its --near/--apart rules leave no free node now (PreFilter's waits are above)
        return f"held by its placement rules ({diag.summary()})"
    if diag is not None and reason is PendingReason.RESOURCES:
        return f"not enough free resources: {diag.summary()}"
    if diag is not None and diag.status.is_success:
        return "it fits now; the next scheduling pass should start it"
    return reason.value


def _topology_detail(diag: Diagnosis) -> str:
    """The nodes are there, but not where the job's topology request wants them: a
    ``--switches`` wait for fewer leaves, or no domain of a ``required`` level with
    enough free nodes now."""
    st = diag.status
    if st.reason is PendingReason.TOPOLOGY:
        return f"waiting for a better placement: {st.message} ({diag.summary()})"
    return f"no placement the topology allows now: {st.message} ({diag.summary()})"


def _victims(jobs: Iterable[Job], job: Job) -> list[Job]:
    """The running jobs being preempted for ``job`` (``hal.state.preempt`` marks them)."""
    mark = str(job.id)
    return sorted((j for j in jobs if j.extra.get(PREEMPTED_BY) == mark), key=lambda j: j.id)


def _diagnose(
    scheduler: Scheduler, snap: ClusterSnapshot, job: Job, group: tuple[Job, ...] = ()
) -> Diagnosis:
    """``group``: the het job ``job`` is a component of, by offset, as ``place_group``
    shows it to the plugins (its licenses are judged together at the first one)."""
    # Own Framework: the scheduler's worker thread may be running a pass with its own.
    framework = Framework(scheduler.profile)
    ctx = PassContext.from_snapshot(snap)
    if group:
        ctx.data.write(GROUP, group)
    return diagnose(framework, ctx, job)


def _priority(
    service: PriorityService | None, job: Job
) -> tuple[JobPriority | None, ShareRow | None]:
    """A pending job's priority factors and the fair-share row its factor came from,
    both from its last priority calculation, so that they agree with each other and add
    up to the priority the queue uses; other jobs (and a pending one whose association
    the calculation did not know) get their row as ``sshare`` shows it now. Reads only."""
    if service is None:
        return None, None
    prio: JobPriority | None = None
    if service.enabled and job.state is JobState.PENDING:
        prio = service.calculated(job)
    if prio is not None and prio.share is not None:
        return prio, prio.share
    account, user = service.assoc(job)
    now = {(r.account, r.user): r for r in service.shares()}
    return prio, now.get((account, user))


async def explain(
    ctx: Services,
    priority: PriorityService | None,
    ident: str,
    cloud: CloudService | None = None,
) -> ExplainInfo:
    cluster = ctx.cluster
    job = cluster.resolve(ident)[0]
    scheduler: Scheduler = ctx.scheduler
    diag: Diagnosis | None = None
    ahead: list[Job] = []
    earliest: float | None = None
    het_blocker: str | None = None
    if job.state is JobState.PENDING:
        snap = ctx.snapshot()  # with the views a pass sees: [data], the traffic graph
        loop = asyncio.get_running_loop()
        diag = await loop.run_in_executor(None, _diagnose, scheduler, snap, job)
        if job.spec.het is not None:  # the whole het job waits for its blocking component
            group = tuple(
                p
                for p in cluster.het_components(job.spec.het.job_id)
                if p.state is JobState.PENDING and p.spec.het is not None
            )
            for part in group:
                part_diag = await loop.run_in_executor(
                    None, _diagnose, scheduler, snap, part, group
                )
                if not part_diag.status.is_success:
                    diag, het_blocker = part_diag, part.display_id  # 123+1
                    break
        ahead = _queue_ahead(scheduler, snap, job)
        if job.expected_start is None and not diag.stopped_at_pre_filter:
            found = await loop.run_in_executor(None, scheduler.will_run, snap, job)
            earliest = getattr(found, "start_time", None)
    prio, share = _priority(priority, job)
    blocking = ""
    if diag is not None and not diag.status.is_success:
        blocking = diag.status.plugin
    detail = _detail(job, diag, ahead, _victims(cluster.unfinished.values(), job), cluster)
    pending = job.state is JobState.PENDING
    making = cloud.making_for(job.id) if cloud is not None and pending else []
    if making:
        now = cluster.clock.now()
        nodes = ", ".join(
            f"{node} (group {group}, {now - at:.0f} s ago)" for node, group, at in making
        )
        detail += f"; [cloud] made node(s) for it: {nodes}; it can start once they join"
    detail += _waking(ctx, job.id) if pending else ""
    budget = cloud.budget_wait(job.id) if cloud is not None and pending else ""
    if budget:
        detail += f"; {budget}"
    return ExplainInfo(
        job_id=job.id,
        display_id=job.display_id,
        state=job.state.value,
        reason=job.reason.value,
        detail=detail,
        cloud_nodes=[node for node, _, _ in making],
        burst=burst_info(cloud.decisions.get(job.id)) if cloud is not None and pending else None,
        blocking_plugin=blocking,
        nodes_total=diag.nodes_total if diag else 0,
        nodes_available=diag.nodes_available if diag else 0,
        nodes_needed=diag.nodes_needed if diag else 0,
        rejections=[
            NodeRejection(plugin=p, reason=label, nodes=n)
            for p, label, n in (diag.rejections if diag else ())
        ],
        summary=diag.summary() if diag else "",
        jobs_ahead=len(ahead),
        ahead_ids=[j.display_id for j in ahead[:AHEAD_SHOWN]],
        priority=priority_info(prio) if prio is not None else None,
        fairshare=share_info(share) if share is not None else None,
        expected_start=job.expected_start,
        earliest_start=earliest,
        het_blocking_component=het_blocker,
        placement=job.extra.get(PLACEMENT_NOTE),
        feedback_action=job.extra.get(ACTION),
    )


def _waking(ctx: Services, job_id: int) -> str:
    """What ``explain`` adds for a job whose nodes are being powered up (``[power]``)."""
    power = ctx.power
    waking = power.waking_for(job_id) if power is not None else []
    if not power or not waking:
        return ""
    now = ctx.cluster.clock.now()
    boot = power.boot_seconds()
    nodes = ", ".join(
        f"{node} (resumed {now - at:.0f} s ago, expected back in {max(0.0, at + boot - now):.0f} s)"
        for node, at in waking
    )
    return f"; [power] waking node(s) for it: {nodes}; it can start once they are back"
