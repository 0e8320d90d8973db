"""The job runs in ``job.partition`` (resolved by the server at submit), on that
partition's nodes, within its limits.

Limit violations are UNSCHEDULABLE, not UNRESOLVABLE: Slurm keeps such jobs pending with
the limit as the reason, because an operator may raise the limit.
"""

from __future__ import annotations

from hal.core.job import Job
from hal.core.states import PartitionState, PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import FilterPlugin, FilterResult, PreFilterPlugin
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.status import SUCCESS, Status, unresolvable, unschedulable

NAME = "partition"
# per pass: partition → its Filter result
_RESULTS: StateKey[dict[str, FilterResult]] = StateKey("partition.results")


class PartitionLimits:
    name = NAME

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        part = ctx.partitions.get(job.partition)
        if part is None:
            return unresolvable(
                PendingReason.BAD_CONSTRAINTS, f"partition {job.partition!r} does not exist", NAME
            )
        if not part.state.starts_jobs:  # DOWN or INACTIVE: its queued jobs wait
            reason = (
                PendingReason.PARTITION_DOWN
                if part.state is PartitionState.DOWN
                else PendingReason.PARTITION_INACTIVE
            )
            return unschedulable(reason, f"partition {part.name} is {part.state.lower()}", NAME)
        limit = job.time_limit_s
        if part.max_time_s and (limit == 0 or limit > part.max_time_s):
            asked = "unlimited" if limit == 0 else f"{limit}s"
            return unschedulable(
                PendingReason.PARTITION_TIME_LIMIT,
                f"time limit {asked} exceeds partition {part.name}'s {part.max_time_s}s",
                NAME,
            )
        if part.max_nodes and job.spec.nodes_min > part.max_nodes:
            return unschedulable(
                PendingReason.PARTITION_NODE_LIMIT,
                f"{job.spec.nodes_min} nodes exceed partition {part.name}'s {part.max_nodes}",
                NAME,
            )
        return SUCCESS

    def filter(
        self, ctx: PassContext, state: CycleState, job: Job, request: NodeRequest
    ) -> FilterResult:
        # One result per partition and pass: the mask is the table's own (shared by its
        # copies and backfill's windows), so a result kept for the same mask is reused.
        mask = ctx.nodes.partition_mask(job.partition)
        results = ctx.data.get(_RESULTS)
        if results is None:
            results = {}
            ctx.data.write(_RESULTS, results)
        found = results.get(job.partition)
        if found is None or found.feasible is not mask:
            # the message labels the nodes outside the partition in ``hal explain``
            found = FilterResult(mask, message=f"not in partition {job.partition}")
            results[job.partition] = found
        return found


def new(args: PluginArgs) -> PartitionLimits:
    reject_unknown_args(args, ())
    return PartitionLimits()


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_FILTER: type[PreFilterPlugin] = PartitionLimits
_FILTER: type[FilterPlugin] = PartitionLimits
