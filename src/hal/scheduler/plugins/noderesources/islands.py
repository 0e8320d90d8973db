"""``--topology required=nvlink``: each node's GPUs of the job from one NVLink island.

Which GPUs a job gets is decided at allocation (``NodeTable.free_gpu_ids``, best fit
among the islands: one island whenever one has enough free GPUs). Without a requirement
that is a preference; with ``required=nvlink`` this plugin makes it a condition:

* PreFilter: no node of the partition has an island as large as the job's GPUs per node
  → UNRESOLVABLE ``BadConstraints`` (it could never run); jobs without the requirement
  or without GPUs skip the plugin;
* Filter: only nodes with an island holding that many free GPUs now (others wait with
  ``Resources``, as for any shortage).

``preferred=nvlink`` is what every GPU job gets anyway, so it needs no plugin.
"""

from __future__ import annotations

import numpy as np

from hal.core.gpu_islands import NVLINK, complete_islands, largest_free_island
from hal.core.job import Job
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.interfaces import FilterResult
from hal.scheduler.framework.node_table import BoolArray, NodeTable
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.status import SKIP, SUCCESS, Status, unresolvable

NAME = "nvlink"


def requires_one_island(job: Job) -> bool:
    wanted = job.spec.topology
    return wanted is not None and wanted.required and wanted.level == NVLINK


def island_fit(table: NodeTable, gpus: int) -> BoolArray:
    """Nodes with an NVLink island holding ``gpus`` free GPUs.

    Backfill's tables of a future window carry that window's free counts but today's
    GPU-id map (``NodeTable.with_free``): a node whose GPUs are all free there counts
    with its whole islands; one partly taken is judged on today's ids (a job waiting for
    an island is then planned for when the node is empty, never too early)."""
    mask = table.free_gpus >= gpus
    for row in np.flatnonzero(mask).tolist():
        node = table.nodes[row]
        cap = int(table.cap_gpus[row])
        if node.gpu_islands:
            used = table.gpus_in_use[row] if table.free_gpus[row] < cap else 0
            mask[row] = largest_free_island(node.gpu_islands, cap, used) >= gpus
    return mask


class NvlinkIslands:
    name = NAME

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        if job.spec.topology is None or not requires_one_island(job):  # (most: no call)
            return SKIP
        need = NodeRequest.for_job(job.spec, max(job.spec.nodes_min, 1)).gpus
        if need == 0:
            return SKIP
        table = ctx.nodes
        largest = 0
        for row in np.flatnonzero(table.partition_mask(job.partition)).tolist():
            node = table.nodes[row]
            whole = complete_islands(node.gpu_islands, int(table.cap_gpus[row]))
            largest = max(largest, max((len(i) for i in whole), default=0))
        if largest < need:
            return unresolvable(
                PendingReason.BAD_CONSTRAINTS,
                f"--topology required={NVLINK}: the largest NVLink island in partition "
                f"{job.partition} has {largest} GPU(s), the job needs {need} per node; "
                "ask for fewer GPUs per node or drop the requirement",
                NAME,
            )
        return SUCCESS

    def filter(
        self, ctx: PassContext, state: CycleState, job: Job, request: NodeRequest
    ) -> FilterResult:
        return FilterResult(
            island_fit(ctx.nodes, request.gpus),
            PendingReason.RESOURCES,
            f"no NVLink island with {request.gpus} free GPUs (--topology required={NVLINK})",
        )


def new(args: PluginArgs) -> NvlinkIslands:
    reject_unknown_args(args, ())
    return NvlinkIslands()
