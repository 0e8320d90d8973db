"""Jobs that name several partitions (``sbatch -p a,b``): the main pass tries such a job
in each, in the order listed, and it starts in the first that has room for it, as
Slurm's, which queues it in every one of them (``hal.core.partition_list``). One that
starts nowhere holds back every partition where it is short of nodes, as Slurm's main
loop marks each partition a job fails in for lack of resources, and goes to backfill as
it is in the first where it waits for room.

The backfill stage tries it in each of its partitions that backfill plans, as it would
run there (``in_partition``: that partition's nodes, and its DefaultTime when it named
no --time), in the order listed: it starts now in the first where it fits without
delaying a reservation (with ``--time-min``, shortened there before the next partition
is tried: Slurm's backfill tries each (job, partition) pair with its own time-min
logic); when any of its partitions owes it a reservation, it is reserved in the one
where it starts first, and the reservation counts in each (it held a place in every
one's queue). Its forecast start is where it would start first too.

``PartitionLists`` is the pass's ``GroupPlacement`` for such jobs (``grouping.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from hal.core.job import Job
from hal.core.partition_list import in_partition, partitions_of
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.grouping import Decided, GroupPlacement
from hal.scheduler.framework.interfaces import BackfillPlugin, BackfillPolicy
from hal.scheduler.framework.planner import SHORTENABLE, BackfillResult, held_for
from hal.scheduler.framework.request import PlacementKey, placement_key
from hal.scheduler.framework.runtime import FitCache, Framework, Gate, Mode, Outcome, Stage
from hal.scheduler.framework.status import Code

if TYPE_CHECKING:
    from hal.scheduler.framework.planner import Found, Planner


def waits_for_room(out: Outcome) -> bool:
    """Held back by its queue, or short of nodes: it would start there once they free
    up (the verdicts the pass sends to backfill)."""
    return short_of_nodes(out) or (
        out.status.code is Code.UNSCHEDULABLE and out.stage is Stage.GATE
    )


def short_of_nodes(out: Outcome) -> bool:
    """Failed Filter or placement for lack of free nodes: the job blocks that queue."""
    return (
        out.status.code is Code.UNSCHEDULABLE
        and out.stage in (Stage.FILTER, Stage.PLACEMENT)
        and out.status.reason is PendingReason.RESOURCES
    )


def place_in_partitions(
    framework: Framework, ctx: PassContext, job: Job, gate: Gate, fit_cache: FitCache
) -> tuple[Outcome, Job, list[str]]:
    """Place ``job`` (NOW) in the first of its partitions that can take it, and return
    the job as it starts there (its partition and time limit: ``in_partition``). When
    none can: the verdict of the first partition where it waits for room, with the job
    as it is there (it goes to backfill there), else its first partition's verdict (the
    job itself); and the partitions where it is short of nodes (it holds them back)."""
    shown: tuple[Outcome, Job] | None = None
    first: tuple[Outcome, Job] | None = None
    short: list[str] = []
    for name in partitions_of(job):
        there = in_partition(job, ctx.partitions, name)
        out = framework.place(ctx, there, Mode.NOW, gate=gate, fit_cache=fit_cache)
        if out.status.is_success:
            return out, there, []
        if first is None:
            first = (out, there)
        if shown is None and waits_for_room(out):
            shown = (out, there)
        if short_of_nodes(out):
            short.append(name)
    found = shown or first
    assert found is not None  # partitions_of gives at least one
    return *found, short


class PartitionLists:
    """Jobs naming several partitions as a ``GroupPlacement``: one instance per pass."""

    __slots__ = ("_runtimes",)
    forecasts = True

    def __init__(self) -> None:
        # (job id, partition) → the planned run time of a job as it runs there
        self._runtimes: dict[tuple[int, str], float] = {}

    def claims(self, job: Job) -> bool:
        listed = job.spec.partitions
        return len(listed) > 1 and job.partition in listed

    def members(self, jobs: Sequence[Job]) -> list[Job]:
        return [
            job
            for job in jobs
            if len(job.spec.partitions) > 1 and job.partition in job.spec.partitions
        ]

    def decide(
        self, framework: Framework, ctx: PassContext, job: Job, gate: Gate, fit_cache: FitCache
    ) -> Decided:
        tried, there, short = place_in_partitions(framework, ctx, job, gate, fit_cache)
        if tried.status.code is Code.SUCCESS and tried.allocation is not None:
            return Decided(there, tried.status, tried.stage, ((there, tried.allocation),))
        return Decided(there, tried.status, tried.stage, short=short)

    def hand_over(
        self,
        plugin: BackfillPlugin,
        ctx: PassContext,
        policies: dict[str, BackfillPolicy | None],
        held: Sequence[Job],
    ) -> Sequence[Job]:
        """Adds the policies of every partition a held job names to ``policies``; a job
        waiting in one that backfill does not plan (mode ``none``) is handed over as it
        is in the first of its others that it does."""
        out = []
        for job in held:
            if len(job.spec.partitions) > 1:
                names = partitions_of(job)
                for name in names:
                    if name not in policies:
                        policies[name] = plugin.policy_for(name)
                if policies[job.partition] is None:
                    planned = [n for n in names if policies[n] is not None]
                    if planned:
                        job = in_partition(job, ctx.partitions, planned[0])
            out.append(job)
        return out

    def backfill(self, planner: Planner, job: Job, failed_now: dict[PlacementKey, float]) -> None:
        if not self._start_now(planner, job, failed_now) and self._owed(planner, job):
            planner.deferred.append((self, (job,)))

    def reserve(self, planner: Planner, jobs: tuple[Job, ...]) -> None:
        """Reserve the job in the partition where it can start first (a tie: the one
        listed first); its start is its ``expected_start``. It held a place in every one
        of its partitions' queues, so the reservation counts in each."""
        (job,) = jobs
        if not self._owed(planner, job):
            return
        best = self.reservation(planner, job)
        if best is None:
            return
        start, form, runtime, allocation = best
        planner.hold(form, start, runtime, allocation)
        for name in partitions_of(job):
            planner.reserved_in(name)

    def reservation(self, planner: Planner, job: Job) -> Found | None:
        """The earliest reservation of ``job`` over its partitions (a tie: the one listed
        first)."""
        profile = planner.profile
        best: Found | None = None
        for form in self._forms(planner, job):
            planner.plan_counts(form)
            runtime = self._runtime(planner, form)
            found = planner.find_reservation(form, runtime)
            if found is not None and (best is None or profile.times[found[0]] < best[0]):
                best = (profile.times[found[0]], form, runtime, found[1])
        return best

    def _forms(self, planner: Planner, job: Job) -> list[Job]:
        """``job`` as it would run in each of its partitions that backfill plans."""
        policies, partitions = planner.policies, planner.ctx.partitions
        return [
            in_partition(job, partitions, name)
            for name in partitions_of(job)
            if policies.get(name) is not None
        ]

    def _runtime(self, planner: Planner, form: Job) -> float:
        """The planned run time of one of ``_forms``: its time limit may differ per
        partition."""
        key = (form.id, form.partition)
        found = self._runtimes.get(key)
        if found is None:
            found = self._runtimes[key] = planner.plugin.runtime(form)
        return found

    def _owed(self, planner: Planner, job: Job) -> bool:
        """Whether ``job`` is owed a reservation: when any of its partitions owes one."""
        return any(planner.owes(name) for name in partitions_of(job))

    def _start_now(self, planner: Planner, job: Job, failed_now: dict[PlacementKey, float]) -> bool:
        """Start ``job`` now in the first of its partitions where it fits without
        delaying a reservation (each tried as the stage tries any job: its CPUs free
        now, no failed fit of the same key over as long a window, then the cycle; and,
        with ``--time-min``, shortened there before the next partition is tried)."""
        time_min = job.spec.time_min_s
        result = planner.result
        for form in self._forms(planner, job):
            tried = BackfillResult()
            if self._start_form(planner, form, failed_now, tried, bool(time_min)):
                planner.started()
                result.placements.extend(tried.placements)
                result.statuses.update(tried.statuses)
                result.limits.update(tried.limits)
                return True
            if form is job:  # its own verdict where it waits (not another partition's)
                result.statuses.update(tried.statuses)
        return False

    def _start_form(
        self,
        planner: Planner,
        form: Job,
        failed_now: dict[PlacementKey, float],
        tried: BackfillResult,
        shortenable: bool,
    ) -> bool:
        """One partition of ``_start_now``: its whole run, then (``shortenable``: the job
        has a time-min) its shortened run where the whole one stopped for something a
        shorter run may leave free (``SHORTENABLE``), as the stage tries a job of one
        partition. Slurm's backfill likewise tries each (job, partition) pair in turn
        with its own time-min logic, so a shortened start in a partition listed earlier
        comes before a whole one in a later partition."""
        now = planner.ctx.now
        needs = planner.min_cpus(form)
        if needs > planner.free_now(form.partition):
            return False  # (not enough CPUs even now: no shorter run fits either)
        protected = form.partition in planner.protected
        runtime = held_for(form, self._runtime(planner, form), protected)
        key = placement_key(form)
        if now + runtime >= failed_now.get(key, math.inf):
            return shortenable and planner.start_shortened(form, runtime, tried)
        planner.flush()  # earlier reservations first: they constrain this job
        planner.plan_counts(form)
        stage = planner.try_start(form, runtime, needs, tried)
        if stage is Stage.DONE:
            return True
        if stage is Stage.FILTER:
            failed_now[key] = min(failed_now.get(key, math.inf), now + runtime)
        return (
            shortenable and stage in SHORTENABLE and planner.start_shortened(form, runtime, tried)
        )


# The seam's conformance, checked by mypy here (kube's ``var _ Plugin = &T{}``).
_GROUP_PLACEMENT: type[GroupPlacement] = PartitionLists
