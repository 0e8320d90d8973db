"""Jobs that name several partitions (``sbatch -p a,b``): the main pass tries such a job
in each, in the order listed, and it starts in the first that has room for it, as
Slurm's, which queues it in every one of them (``hal.core.partition_list``). One that
starts nowhere holds back every partition where it is short of nodes, as Slurm's main
loop marks each partition a job fails in for lack of resources, and goes to backfill as
it is in the first where it waits for room; the backfill stage tries it in each of its
partitions again (``backfill.py``).
"""

from __future__ import annotations

from hal.core.job import Job
from hal.core.partition_list import in_partition, partitions_of
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.runtime import FitCache, Framework, Gate, Mode, Outcome, Stage
from hal.scheduler.framework.status import Code


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
