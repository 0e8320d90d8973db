"""Preemption: when a job does not fit, choose running jobs to end so that it does.

PostFilter, main pass only. For a job whose Filter verdict is ``Resources``:

1. Jobs already on their way out (COMPLETING, or preempted and in their grace time) are
   counted as gone: if the job fits once they are, it just waits for them (no new
   victims, so a preemption is never repeated pass after pass).
2. Candidates: running jobs it may preempt (``hal.core.preemption``: a QoS its QoS
   lists, which the config guarantees has a lower QoS priority, or a partition of a
   lower tier; past the exempt time; on nodes of the job's partition), least valuable
   first: lowest job priority, then least lost work (CPU-seconds run so far), then id.
   Reclaim (account cohorts, whether ``[preemption]`` is on or not): a job that fits
   within its own account's GrpTRES may also take back quota lent to the cohort: jobs
   of another member account that is above its own GrpTRES, whatever their standing.
3. The shortest prefix of that order whose release lets the job fit (binary search: the
   fit only grows as more is released), then a reprieve pass that gives back, most
   valuable first, every victim the job can do without (kube-scheduler's approach).

The victims go to ``ctx.data[PREEMPTIONS]`` with their mode and grace time; the job keeps
reason ``Resources`` (it still blocks its partition) and a message naming the victims.
The server ends them (``hal.state.preempt``); the job starts in a later pass on what they
free. Nothing is chosen when no set of candidates would be enough.

A victim of mode ``suspend`` frees only its CPUs (``hal.core.preemption.holding``: a
suspended job keeps its memory and GPUs, and still counts as a job on its nodes), so
steps 1 and 3 count it that way: suspending never looks like more room than it makes,
and a job that needs the memory, the GPUs or a whole node does not suspend anyone.
Suspend has no grace time (Slurm ignores GraceTime for it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from hal.core.job import Allocation, Job
from hal.core.node import Partition
from hal.core.preemption import (
    PREEMPT_MODE,
    PREEMPTED_BY,
    PreemptionPolicy,
    PreemptMode,
    PreemptType,
    holding,
    without_cpus,
)
from hal.core.priority import DEFAULT_QOS, PriorityPolicy, Qos
from hal.core.states import JobState
from hal.core.states import PendingReason as R
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.interfaces import PostFilterPlugin
from hal.scheduler.framework.keys import FITS, PREEMPTIONS
from hal.scheduler.framework.node_table import NodeTable
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args
from hal.scheduler.framework.snapshot import Preemption
from hal.scheduler.framework.status import SKIP, Status, unschedulable
from hal.scheduler.plugins.limits.limits import Limits, request_tres

NAME = "preemption"


def leaving(job: Job) -> bool:
    """Already on its way out: its resources will be free without another victim (a
    job suspended by preemption is not: it keeps its memory and GPUs, and its CPUs are
    already free in the table)."""
    if job.state is JobState.COMPLETING:
        return True
    return PREEMPTED_BY in job.extra and job.extra.get(PREEMPT_MODE) != PreemptMode.SUSPEND


class Preempt:
    name = NAME

    def __init__(self, policy: PreemptionPolicy, priority: PriorityPolicy | None = None) -> None:
        self.policy = policy
        qos = priority.qos if priority is not None else ()
        # cohorts: a job within its account's own quota reclaims what others borrowed
        self._limits = Limits(priority) if priority is not None and priority.has_cohorts else None
        self._may_preempt = {q.name: frozenset(q.preempt) for q in qos}
        self._how = {
            q.name: (
                PreemptMode(q.preempt_mode) if q.preempt_mode else policy.mode,
                policy.grace_time_s if q.grace_time_s is None else q.grace_time_s,
            )
            for q in qos
        }

    def post_filter(self, ctx: PassContext, state: CycleState, job: Job, failed: Status) -> Status:
        if failed.reason is not R.RESOURCES or not (self.policy.enabled or self._limits):
            return SKIP
        fits = state.read(FITS)
        table = ctx.nodes.copy()
        for r in ctx.running:
            held, exclusive = holding(r)  # what the table took out for it
            if held is not None and leaving(r):
                table.release(held, exclusive=exclusive)
        if fits(table):
            return unschedulable(R.RESOURCES, "waiting for preempted jobs to end")
        candidates = self._candidates(ctx, job)
        if not candidates:
            return SKIP
        # what a suspended victim keeps (its memory and GPUs, no CPUs)
        kept = {
            r.id: without_cpus(r.allocation)
            for r in candidates
            if r.allocation is not None and self._how_of(r)[0] is PreemptMode.SUSPEND
        }
        victims = _fewest(table, candidates, fits, kept)
        if victims is None:
            return SKIP
        chosen = ctx.data.get(PREEMPTIONS)
        if chosen is None:
            chosen = {}
            ctx.data.write(PREEMPTIONS, chosen)
        for v in victims:
            mode, grace = self._how_of(v)
            chosen.setdefault(v.id, Preemption(v.id, job.id, mode.value, grace))
        ids = ", ".join(str(v.id) for v in sorted(victims, key=lambda v: v.id))
        return unschedulable(R.RESOURCES, f"preempting job(s) {ids}")

    def _how_of(self, victim: Job) -> tuple[PreemptMode, float]:
        """How ``victim`` is preempted and with how much notice (none for suspend)."""
        mode, grace = self._how.get(victim.spec.qos or DEFAULT_QOS, (self.policy.mode, None))
        if mode is PreemptMode.SUSPEND:
            return mode, 0.0
        return mode, self.policy.grace_time_s if grace is None else grace

    def _candidates(self, ctx: PassContext, job: Job) -> list[Job]:
        """Running jobs ``job`` may preempt, least valuable first."""
        taken = ctx.data.get(PREEMPTIONS) or {}
        mine = ctx.nodes.partition_mask(job.partition)
        index = ctx.nodes.index
        reclaims = self._reclaims(ctx, job)
        out: list[tuple[tuple[int, float, int], Job]] = []
        for r in ctx.running:
            alloc = r.allocation
            if (
                alloc is None
                or r.state is not JobState.RUNNING
                or (r.spec.het is not None and r.spec.het.offset > 0)  # ends with its 0
                # a het job is not suspended: its other components would keep their CPUs
                or (r.spec.het is not None and self._how_of(r)[0] is PreemptMode.SUSPEND)
                or leaving(r)
                or r.id in taken
                or not (self._outranks(ctx, job, r) or (reclaims is not None and reclaims(r)))
            ):
                continue
            started = r.start_time if r.start_time is not None else ctx.now
            if ctx.now - started < self.policy.exempt_time_s:
                continue
            if not any(mine[index[n]] for n in alloc.nodes if n in index):
                continue  # frees nothing the job could use
            lost = (ctx.now - started) * alloc.total().cpus
            out.append(((r.priority, lost, r.id), r))
        out.sort(key=lambda e: e[0])
        return [r for _, r in out]

    def _reclaims(self, ctx: PassContext, job: Job) -> Callable[[Job], bool] | None:
        """When ``job`` fits within its own account's quota and that account is in a
        cohort: which running jobs hold quota they borrowed from it (jobs of another
        member of the cohort that is above its own GrpTRES). None otherwise."""
        limits = self._limits
        if limits is None:
            return None
        owner = limits.lender_of(job)
        usage = limits.usage(ctx)
        if owner is None or not limits.within_own(usage, owner, request_tres(job)):
            return None
        cohort = limits.cohort_of(owner)

        def borrowed(r: Job) -> bool:
            member = limits.lender_of(r)
            return (
                member is not None
                and member != owner
                and member in cohort
                and limits.borrowing(usage, member)
            )

        return borrowed

    def _outranks(self, ctx: PassContext, job: Job, victim: Job) -> bool:
        if self.policy.type is PreemptType.OFF:
            return False
        if self.policy.type is PreemptType.QOS:
            allowed = self._may_preempt.get(job.spec.qos or DEFAULT_QOS, frozenset())
            return (victim.spec.qos or DEFAULT_QOS) in allowed
        mine, theirs = ctx.partitions.get(job.partition), ctx.partitions.get(victim.partition)
        return mine is not None and theirs is not None and mine.priority_tier > theirs.priority_tier


def _free(table: NodeTable, r: Job, kept: Mapping[int, Allocation], sign: int) -> None:
    """Give back (``sign`` 1) or take again (-1) what preempting ``r`` frees: all its
    allocation, less what it keeps while suspended (``kept``)."""
    assert r.allocation is not None
    left = kept.get(r.id)
    if sign > 0:
        table.release(r.allocation, exclusive=r.spec.exclusive)
        if left is not None:
            table.take(left)
    else:
        if left is not None:
            table.release(left)
        table.take(r.allocation, exclusive=r.spec.exclusive)


def _fewest(
    base: NodeTable,
    candidates: list[Job],
    check: Callable[[NodeTable], bool],
    kept: Mapping[int, Allocation],
) -> list[Job] | None:
    """The shortest prefix of ``candidates`` whose preemption makes the job fit on
    ``base``, minus every victim it can do without; None if all of them are not enough."""

    def released(k: int) -> NodeTable:
        table = base.copy()
        for r in candidates[:k]:
            _free(table, r, kept, 1)
        return table

    if not check(released(len(candidates))):
        return None
    lo, hi = 1, len(candidates)  # check(released(hi)) holds
    while lo < hi:
        mid = (lo + hi) // 2
        if check(released(mid)):
            hi = mid
        else:
            lo = mid + 1
    victims = candidates[:hi]
    table = released(hi)
    chosen: list[Job] = []
    for r in reversed(victims):  # most valuable first: spare it if the job fits anyway
        _free(table, r, kept, -1)
        if check(table):
            continue
        _free(table, r, kept, 1)
        chosen.append(r)
    return chosen


def standing(
    policy: PreemptionPolicy | None, qos: Sequence[Qos], partitions: Sequence[Partition]
) -> Callable[[Job], int] | None:
    """A job's standing for preemption (its QoS's priority, or its partition's tier),
    which the queue order puts first when preemption is on; None when it is off."""
    if policy is None or not policy.enabled:
        return None
    if policy.type is PreemptType.QOS:
        ranks = {q.name: q.priority for q in qos}
        return lambda job: ranks.get(job.spec.qos or DEFAULT_QOS, 0)
    tiers = {p.name: p.priority_tier for p in partitions}
    return lambda job: tiers.get(job.partition, 0)


def new(
    args: PluginArgs,
    policy: PreemptionPolicy | None = None,
    priority: PriorityPolicy | None = None,
) -> Preempt:
    """The plugin takes no arguments: who may preempt whom is ``[preemption]``, the QoS
    and the account cohorts of ``hal.toml`` (``default_registry(preemption_policy=...,
    policy=...)``)."""
    reject_unknown_args(args, ())
    return Preempt(policy or PreemptionPolicy(), priority)


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_POST_FILTER: type[PostFilterPlugin] = Preempt
