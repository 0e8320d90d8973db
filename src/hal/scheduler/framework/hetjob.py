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
(``framework/backfill.py``) without caching a Filter failure for their keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from hal.core.job import Allocation, Job
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.runtime import Framework, Mode, Stage
from hal.scheduler.framework.status import SUCCESS, Status, unschedulable

PLUGIN = "hetjob"  # Status.plugin for verdicts about the group as a whole
_SHORTAGE = (Stage.FILTER, Stage.PLACEMENT)


def pending_het_groups(pending: Sequence[Job]) -> dict[int, list[Job]]:
    """Het job id → its pending components, by offset."""
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
