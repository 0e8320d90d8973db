"""Heterogeneous jobs (Slurm's hetjobs) in the scheduling pass: all components or none.

A het job is one job per component (consecutive ids, ``JobSpec.het``), each with its own
request, partition and constraints. The pass decides the whole group when the first of
its components comes up in queue order (``decide_group``): ``Framework.place_group``
runs every component's cycle on the nodes the earlier ones left, and undoes them all if
one does not fit, so a pass never starts component 0 and leaves the others stranded.

Every component then carries the group's verdict: the one that failed its own, the
others the same code and reason with a message naming the blocking component (what
``hal explain`` shows). Only the blocking component counts as short of nodes for its
queue; the others are held back behind it (``Stage.GATE``) so backfill plans the group
without caching a Filter failure for their keys. In the backfill stage the group, once
all its components are held back, starts now whole in holes that delay no reservation
or is reserved at one start for all (``Planner.start_together``,
``reserve_together``); its components get no forecast start of their own.

``HetGroups`` is the pass's ``GroupPlacement`` for them (``grouping.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from hal.core.job import Allocation, Job
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.grouping import Decided, GroupPlacement
from hal.scheduler.framework.interfaces import BackfillPlugin, BackfillPolicy
from hal.scheduler.framework.request import PlacementKey
from hal.scheduler.framework.runtime import FitCache, Framework, Gate, Mode, Stage
from hal.scheduler.framework.status import SUCCESS, Status, unschedulable

if TYPE_CHECKING:
    from hal.scheduler.framework.planner import Found, Planner

PLUGIN = "hetjob"  # Status.plugin for verdicts about the group as a whole
_SHORTAGE = (Stage.FILTER, Stage.PLACEMENT)


def pending_het_groups(pending: Sequence[Job]) -> dict[int, list[Job]]:
    """Het job id → its components among ``pending``, by offset."""
    groups: dict[int, list[Job]] = {}
    for job in pending:
        het = job.spec.het
        if het is not None:
            groups.setdefault(het.job_id, []).append(job)
    for members in groups.values():
        members.sort(key=lambda j: j.spec.het.offset if j.spec.het else 0)
    return groups


def decide_group(
    framework: Framework,
    ctx: PassContext,
    group: Sequence[Job],
    gate: Callable[[Job], Status | None],
    placed: list[tuple[Job, Allocation]],
) -> dict[int, tuple[Status, Stage]]:
    """Place ``group`` now, all or nothing; append the placements to ``placed``. The
    verdict and stage of every component, by job id."""
    first = group[0].spec.het
    assert first is not None
    if len(group) != first.size:
        # some component is no longer pending (cancelled alone, or ended): the rest can
        # never start together with it
        missing = sorted(set(range(first.size)) - {j.spec.het.offset for j in group if j.spec.het})
        st = unschedulable(
            PendingReason.DEPENDENCY,
            f"het job {first.job_id}: component(s) {missing} are not pending",
            PLUGIN,
        )
        return {j.id: (st, Stage.PRE_FILTER) for j in group}
    outcomes, failed = framework.place_group(ctx, group, Mode.NOW, gate=gate)
    if failed is None:
        for job, out in zip(group, outcomes, strict=True):
            assert out.allocation is not None
            placed.append((job, out.allocation))
        return {j.id: (SUCCESS, Stage.DONE) for j in group}
    blocker = group[failed]
    bad = outcomes[failed]
    verdicts = {blocker.id: (bad.status, bad.stage)}
    name = blocker.spec.het.display_id if blocker.spec.het else str(blocker.id)
    message = f"het job component {name} blocks: {bad.status.message or bad.status.reason}"
    shortage = bad.stage in _SHORTAGE and bad.status.reason is PendingReason.RESOURCES
    for job in group:
        if job.id == blocker.id:
            continue
        st = replace(bad.status, message=message, plugin=bad.status.plugin or PLUGIN)
        verdicts[job.id] = (st, Stage.GATE if shortage or bad.stage is Stage.GATE else bad.stage)
    return verdicts


class HetGroups:
    """Het jobs' components as a ``GroupPlacement``: one instance per pass."""

    __slots__ = ("_groups", "_held", "_seen", "_verdicts")
    forecasts = False  # a component's start is its group's: none of its own

    def __init__(self) -> None:
        # het job id → its pending components (gathered when the first comes up: most
        # queues have none)
        self._groups: dict[int, list[Job]] | None = None
        self._verdicts: dict[int, tuple[Status, Stage]] = {}  # component id → verdict
        # backfill: het job id → its components the stage plans; the het jobs tried
        self._held: dict[int, tuple[Job, ...]] | None = None
        self._seen: set[int] = set()

    def claims(self, job: Job) -> bool:
        return job.spec.het is not None

    def members(self, jobs: Sequence[Job]) -> list[Job]:
        return [job for job in jobs if job.spec.het is not None]

    def decide(
        self, framework: Framework, ctx: PassContext, job: Job, gate: Gate, fit_cache: FitCache
    ) -> Decided:
        het = job.spec.het
        assert het is not None
        found = self._verdicts.get(job.id)
        if found is not None:
            return Decided(job, *found, ran=False, name=het.display_id)
        if self._groups is None:
            self._groups = pending_het_groups(ctx.snapshot.pending)
        placed: list[tuple[Job, Allocation]] = []
        self._verdicts.update(decide_group(framework, ctx, self._groups[het.job_id], gate, placed))
        st, stage = self._verdicts[job.id]
        return Decided(job, st, stage, placed, name=het.display_id)

    def hand_over(
        self,
        plugin: BackfillPlugin,
        ctx: PassContext,
        policies: dict[str, BackfillPolicy | None],
        held: Sequence[Job],
    ) -> Sequence[Job]:
        return held

    def backfill(self, planner: Planner, job: Job, failed_now: dict[PlacementKey, float]) -> None:
        """The whole het job, as one unit, when its first component comes up; only when
        every component is held back (one waiting for its own reason keeps the group
        from starting)."""
        het = job.spec.het
        assert het is not None
        if het.job_id in self._seen:
            return
        self._seen.add(het.job_id)
        if self._held is None:
            held = pending_het_groups(planner.jobs)
            self._held = {hid: tuple(members) for hid, members in held.items()}
        members = self._held.get(het.job_id, ())
        if len(members) != het.size:
            return
        planner.flush()  # earlier reservations first: they constrain the group
        if not planner.start_together(members) and planner.owes(members[0].partition):
            planner.deferred.append((self, members))

    def reserve(self, planner: Planner, jobs: tuple[Job, ...]) -> None:
        if planner.reserve_together(jobs):
            planner.reserved_in(jobs[0].partition)

    def reservation(self, planner: Planner, job: Job) -> Found | None:
        return None  # (never asked: ``forecasts`` is False)


# The seam's conformance, checked by mypy here (kube's ``var _ Plugin = &T{}``).
_GROUP_PLACEMENT: type[GroupPlacement] = HetGroups
