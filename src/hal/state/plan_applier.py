"""The plan applier: re-check a scheduler plan against the latest state before committing.

The scheduler works on a snapshot that may be stale by the time its plan arrives (a job was
cancelled, a node went down, an agent reported a finish that freed room). Like Nomad's plan
applier, ``apply_plan`` re-validates every placement against the current mirror
(``check_placement``) and accepts only those that still fit; rejected ones simply stay
pending and the next pass retries them. The components of a het job start together or not
at all. The plan's terminations and preemption marks are written in the same change as
its last starts, its advisory reasons in changes after them.

At most ``[scheduler] max_job_starts`` placements of one partition start per plan
(Slurm's ``sched_max_job_start``, per partition), in the plan's order: writing a start
and its launch costs the server's event loop, and a pass that placed thousands would
cost it seconds; per partition, so that one partition's backlog never keeps another's jobs
from their idle nodes. The placements past the cap are left as refused ones are, for the
next pass, which the commit wakes at once. The starts a plan keeps are written
``APPLY_CHUNK`` at a time, each slice a change (a transaction) of its own, so that
requests and agents' reports are served between them (ADR 0030).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hal.core.cloud_costs import RATE, rate_mark
from hal.core.job import NOT_ELIGIBLE, WAITING_ON_OTHERS, Job
from hal.core.node import Node, Partition
from hal.core.partition_list import in_partition, partitions_of
from hal.core.preemption import PREEMPTING
from hal.core.states import JobState, PendingReason
from hal.scheduler.framework.snapshot import Placement, Plan
from hal.state import agents, preempt
from hal.state import reservations as advance_reservations
from hal.state.job_changes import PLACEMENT_NOTE, lowered_limit, within_deadline
from hal.state.node_usage import NodeUsage, hold
from hal.state.store import EventRow

if TYPE_CHECKING:
    from hal.state.cluster import Cluster


# the most placements one change of a plan writes: a start's re-check, new version and
# launch cost the event loop a few tenths of a millisecond of CPU, and the commit's
# listeners more; a slice is tens of milliseconds of it, a whole plan of 1,000 starts
# ten times that (longer in wall time where the server gets a fraction of a core)
APPLY_CHUNK = 100
# the most of a plan's reasons one change writes: a full pass sends every waiting job
# whose reason or expected start changed (at scale, most of them), and each is a new
# ``Job`` built on the loop (tens of microseconds each: 25,000 are a second of it)
UPDATE_CHUNK = 2000


async def apply_plan(cluster: Cluster, plan: Plan, started: list[int] | None = None) -> list[int]:
    """Commit the parts of ``plan`` that still hold; return the ids started, added to
    ``started`` (given: the caller's list, which keeps those of the changes before one
    that fails).

    Its placements go in changes of at most ``APPLY_CHUNK`` (a het job's components in
    one), in the plan's order, each re-checked against the state its change finds and
    committed alone; the loop serves what waits between two (the lock is released, so
    agents' reports commit there too). The plan's terminations and preemption marks go
    with the last; then its reasons, ``UPDATE_CHUNK`` a change (each checked against the
    job as that change finds it). A change that fails leaves those before it stored and
    started, its own and the later placements pending: the next pass places them again
    (the re-check refuses what did start, so applying a plan again starts nothing
    twice)."""
    starts: Counter[str] = Counter()  # by partition, up to ``max_job_starts``
    chunks = _chunks(cluster, plan.placements, APPLY_CHUNK)
    started = [] if started is None else started
    for i, placements in enumerate(chunks):
        if i:
            await asyncio.sleep(0)  # (an uncontended lock is taken without yielding)
        if i < len(chunks) - 1:
            part = Plan(plan.revision, placements=placements)
        else:
            part = dataclasses.replace(plan, placements=placements, updates=())
        started += await _apply_part(cluster, part, starts)
    for first in range(0, len(plan.updates), UPDATE_CHUNK):
        await asyncio.sleep(0)
        updates = plan.updates[first : first + UPDATE_CHUNK]
        await _apply_part(cluster, Plan(plan.revision, updates=updates), starts)
    return started


def _chunks(
    cluster: Cluster, placements: tuple[Placement, ...], size: int
) -> list[tuple[Placement, ...]]:
    """``placements`` in slices of about ``size`` (one at least, empty when there are
    none), in their order but for a het job's components, which go together where its
    first one is (all start together or none does: one change decides)."""
    if len(placements) <= size:
        return [placements]
    units: list[list[Placement]] = []
    het_units: dict[int, list[Placement]] = {}
    for placement in placements:
        job = cluster.jobs.get(placement.job_id)
        het = job.spec.het if job is not None else None
        if het is None:
            units.append([placement])
        elif het.job_id in het_units:
            het_units[het.job_id].append(placement)
        else:
            units.append(het_units.setdefault(het.job_id, [placement]))
    chunks: list[tuple[Placement, ...]] = []
    current: list[Placement] = []
    for unit in units:
        if current and len(current) + len(unit) > size:
            chunks.append(tuple(current))
            current = []
        current += unit
    chunks.append(tuple(current))
    return chunks


async def _apply_part(cluster: Cluster, plan: Plan, starts: Counter[str]) -> list[int]:
    """One change of ``apply_plan``: ``plan``'s placements (one slice), terminations,
    reasons and marks; ``starts``: the starts by partition of the changes before it,
    counted on."""
    async with cluster.change() as change:
        now = cluster.clock.now()
        if any(p.job_id not in cluster.jobs for p in plan.placements):
            # a job cancelled since the pass read the cluster, and already forgotten
            known = tuple(p for p in plan.placements if p.job_id in cluster.jobs)
            plan = dataclasses.replace(plan, placements=known)
        started: list[Job] = []
        started_in: dict[int, str] = {}  # job id: the partition its start counts in
        events: list[EventRow] = []
        # re-check placements against a scratch copy of usage, accumulating as we go:
        # of the nodes the plan places on only (the others' are never read here)
        scratch = _scratch_usage(cluster.usage, plan)
        refused_het = _refused_het_jobs(cluster, plan, scratch)
        cap = cluster.config.scheduler_max_job_starts
        for placement in plan.placements:
            job = cluster.jobs[placement.job_id]
            partition = placement.partition or job.partition
            if cap and starts[partition] >= cap:
                continue  # it stays pending: the next pass (this commit wakes it) retries
            het = job.spec.het
            if het is not None and het.job_id in refused_het:
                continue  # all components start together or none does
            if check_placement(placement, cluster.jobs, cluster.nodes, scratch, cluster.partitions):
                continue
            lowered = placement.time_limit_s  # backfill's, within --time-min
            if cluster.reservations and advance_reservations.placement_conflict(
                cluster,
                job if lowered is None else job.evolve(time_limit_s=lowered),
                placement.allocation.nodes,
                now,
            ):
                continue  # a reservation created or changed since the pass read
            if placement.partition and placement.partition != job.partition:
                job = in_partition(job, cluster.partitions, placement.partition)  # -p a,b
            if lowered is not None:
                job = lowered_limit(job, lowered)
            job = within_deadline(job, now)
            if PREEMPTING in job.extra:  # it no longer goes first in the queue
                job = job.evolve(extra=preempt.cleared(job.extra))
            # this start's own note and cloud rate, or none (never an earlier run's)
            rate = rate_mark(placement.allocation.nodes, cluster.cloud_prices)
            for key, value in ((PLACEMENT_NOTE, placement.note or None), (RATE, rate)):
                if value is not None or key in job.extra:
                    job = job.evolve(extra=_with_mark(job.extra, key, value))
            job = job.evolve(
                state=JobState.RUNNING,
                reason=PendingReason.NONE,
                start_time=now,
                allocation=placement.allocation,
                # kept as it was while pending (its submission, begin, release or
                # dependency met), not its start: Slurm 22.05.8 keeps it too
                eligible_time=job.eligible_since(now),
                launched=False,
                expected_start=None,
            )
            hold(scratch, job)
            started.append(job)
            started_in[job.id] = partition
            starts[partition] += 1
            events.append(
                EventRow(
                    now,
                    "job.started",
                    job_id=job.id,
                    state="RUNNING",
                    data={"nodes": list(placement.allocation.nodes)},
                )
            )
        partial = _partly_started_het_jobs(cluster, started)
        if partial:  # e.g. a reservation now claims one component's node
            started = [j for j in started if j.spec.het is None or j.spec.het.job_id not in partial]
            kept = {j.id for j in started}
            # (the cap counts starts across the plan's changes: these did not start)
            starts.subtract(p for job_id, p in started_in.items() if job_id not in kept)
            events = [e for e in events if e.job_id in kept]
        ended: list[Job] = []
        for term in plan.terminations:
            target = cluster.jobs.get(term.job_id)
            if target is None or target.state is not JobState.PENDING or target.held:
                continue
            ended.append(target.evolve(state=term.state, reason=term.reason, end_time=now))
            events.append(
                EventRow(
                    now,
                    "job.finished",
                    job_id=target.id,
                    state=term.state.value,
                    data={"reason": term.reason.value},
                )
            )
        # reasons and estimates are advisory: kept in memory, not written per cycle
        # (a job held since the pass read it keeps its hold's reason: no pass sees it
        # again until it is released); when a dependency was met (or an array's
        # throttle let an element go) is written, once per job, so a restart does
        # not count the job eligible since its submission
        met: list[Job] = []
        for update in plan.updates:
            current = cluster.jobs.get(update.job_id)
            if current is not None and current.state is JobState.PENDING and not current.held:
                now_met = (
                    current.reason in WAITING_ON_OTHERS and update.reason not in NOT_ELIGIBLE
                )  # what it waited on was met in this pass: eligible from now on
                reason = _kept_budget_wait(current.reason, update.reason)
                eligible = now if now_met else current.eligible_time
                if (reason, update.expected_start, eligible) == (
                    current.reason,
                    current.expected_start,
                    current.eligible_time,
                ):
                    continue  # the same job still: what was built from it stays valid
                current = current.evolve(
                    reason=reason, expected_start=update.expected_start, eligible_time=eligible
                )
                cluster.jobs[current.id] = cluster.unfinished[current.id] = current
                if now_met:
                    met.append(current)
        marked, marks = preempt.mark(cluster, plan.preemptions, now)
        events.extend(marks)
        if started or ended or marked or met:
            written = {j.id for j in started + ended + marked}
            met = [j for j in met if j.id not in written]
            await change.commit(started + ended + marked + met, events)
        for job in started:
            # (components 1.. of a het job hold their nodes; nothing is launched)
            agents.send_launch(cluster, job)
        preempt.notify(cluster, marked)
        return [j.id for j in started]


def _scratch_usage(usage: Mapping[str, NodeUsage], plan: Plan) -> dict[str, NodeUsage]:
    """A copy of ``usage`` of the nodes ``plan``'s placements name, for the re-check to
    accumulate on: copying every node's took more of a cycle's writing than the starts."""
    scratch: dict[str, NodeUsage] = {}
    for placement in plan.placements:
        for name in placement.allocation.nodes:
            u = usage.get(name)
            if u is not None and name not in scratch:
                scratch[name] = NodeUsage(u.allocated, set(u.gpu_ids), set(u.jobs), u.exclusive)
    return scratch


def _partly_started_het_jobs(cluster: Cluster, started: list[Job]) -> set[int]:
    """Het job ids of which ``started`` holds some components but not all."""
    counts: Counter[int] = Counter(j.spec.het.job_id for j in started if j.spec.het is not None)
    return {hid for hid, n in counts.items() if n != len(cluster.het_components(hid))}


def _refused_het_jobs(cluster: Cluster, plan: Plan, scratch: dict[str, NodeUsage]) -> set[int]:
    """Het job ids some of whose components the plan does not start, or starts on
    nodes no longer free: none of their components may start (all-or-nothing). The
    check runs on a copy of ``scratch``, components in plan order."""
    placed: dict[int, list[int]] = {}
    for placement in plan.placements:
        het = cluster.jobs[placement.job_id].spec.het
        if het is not None:
            placed.setdefault(het.job_id, []).append(het.offset)
    if not placed:
        return set()
    trial = {
        name: NodeUsage(u.allocated, set(u.gpu_ids), set(u.jobs), u.exclusive)
        for name, u in scratch.items()
    }
    refused = {
        hid
        for hid, offsets in placed.items()
        if len(set(offsets)) != len(cluster.het_components(hid))
    }
    for placement in plan.placements:  # every placement, as the commit loop sees them
        job = cluster.jobs[placement.job_id]
        het = job.spec.het
        if het is not None and het.job_id in refused:
            continue
        if check_placement(placement, cluster.jobs, cluster.nodes, trial, cluster.partitions):
            if het is not None:
                refused.add(het.job_id)
            continue
        hold(trial, job.evolve(allocation=placement.allocation))
    return refused


def check_placement(
    placement: Placement,
    jobs: Mapping[int, Job],
    nodes: Mapping[str, Node],
    usage: Mapping[str, NodeUsage],
    partitions: Mapping[str, Partition] | None = None,
) -> str | None:
    """``None`` when the placement still fits; otherwise why it was rejected.
    ``partitions``: the partition it starts in (``Placement.partition``, one of the
    job's) must hold every node (it may have been moved to another since the pass read
    it)."""
    job = jobs.get(placement.job_id)
    if job is None or job.state is not JobState.PENDING:
        return "job is no longer pending"
    if job.held:  # held since the pass read it
        return "job is held"
    lowered = placement.time_limit_s  # backfill's, within --time-min
    if lowered is not None and not (job.spec.time_min_s or 0) <= lowered < (
        job.time_limit_s or lowered + 1
    ):
        return "time limit or time-min changed since the pass"  # lowered again next
    alloc = placement.allocation
    if not alloc.nodes or len(alloc.nodes) != len(alloc.per_node):
        return "malformed allocation"
    if len(set(alloc.nodes)) != len(alloc.nodes):
        return "node listed twice"
    where = placement.partition or job.partition
    if where not in partitions_of(job):
        return f"job is no longer queued in partition {where}"
    partition = partitions.get(where) if partitions is not None else None
    if partition is not None:
        outside = [name for name in alloc.nodes if not partition.contains(name)]
        if outside:
            return f"node {outside[0]} is not in partition {where}"
    for i, name in enumerate(alloc.nodes):
        node = nodes.get(name)
        if node is None or not node.schedulable:
            return f"node {name} is not available"
        used = usage.get(name, NodeUsage())
        if used.exclusive or (job.spec.exclusive and used.jobs):
            return f"node {name} is not free for an exclusive allocation"
        want = alloc.per_node[i]
        if not (used.allocated + want).fits_in(node.resources):
            return f"node {name} no longer has room"
        if i < len(alloc.gpu_ids):
            ids = set(alloc.gpu_ids[i])
            if ids & used.gpu_ids or any(g >= node.resources.gpus or g < 0 for g in ids):
                return f"GPUs on node {name} are taken"
    return None


def _kept_budget_wait(current: PendingReason, new: PendingReason) -> PendingReason:
    """The autoscaler's ``CloudBudget`` stays while the scheduler finds no room for the
    job (it would say Resources or Priority): new nodes would hold it, its budget
    forbids them; the autoscaler takes the reason back once the budget allows."""
    if current is PendingReason.CLOUD_BUDGET and new in _ROOM_REASONS:
        return current
    return new


_ROOM_REASONS = {PendingReason.NONE, PendingReason.PRIORITY, PendingReason.RESOURCES}


def _with_mark(extra: dict[str, str], key: str, value: str | None) -> dict[str, str]:
    """``extra`` with ``key`` set to ``value``, or without it where ``value`` is None."""
    out = {k: v for k, v in extra.items() if k != key}
    if value is not None:
        out[key] = value
    return out
