"""A job's GPUs on a node from one NVLink island: preferred for every GPU job,
required with ``--topology required=nvlink``.

Which GPUs a job gets is decided at allocation (``NodeTable.free_gpu_ids``, best fit
among the islands: one island whenever one has enough free GPUs). Which node it gets is
decided here:

* PreScore/Score (every job of 2 or more GPUs per node, as Kubernetes' topology manager
  "best-effort" and Slurm's GRES link affinity): ``MAX_NODE_SCORE`` on nodes that can
  give the job's GPUs from one island now, 0 on those that would split them. With the
  default profile's weight (``NVLINK_WEIGHT``) this outranks any best-fit difference, so
  a node with a whole island free wins over a fuller node that would split the job; a
  job is never kept waiting for it. Jobs without GPUs, jobs that require an island
  (Filter already kept only such nodes) and tables without islands skip it.
* PreFilter (``required=nvlink`` only): no node of the partition has an island as large
  as the job's GPUs per node → UNRESOLVABLE ``BadConstraints`` (it could never run);
  other jobs skip Filter;
* Filter (``required=nvlink`` only): only nodes with an island holding that many free
  GPUs now (others wait with ``Resources``, as for any shortage).

``preferred=nvlink`` is what every GPU job gets anyway (a multi-node one also prefers
one NVLink domain: the ``topology`` plugin).
"""

from __future__ import annotations

import numpy as np

from hal.core.gpu_islands import NVLINK, complete_islands
from hal.core.job import Job
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterPlugin,
    FilterResult,
    FloatArray,
    IndexArray,
    PreFilterPlugin,
    PreFilterWaiver,
    PreScorePlugin,
    ScorePlugin,
)
from hal.scheduler.framework.node_table import BoolArray, IntArray, NodeTable
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.status import SKIP, SUCCESS, Status, unresolvable
from hal.scheduler.plugins.noderesources.fit import Kept, kept_rows

NAME = "nvlink"
# The default profile's Score weight: one island (100 points, so 200) outranks any
# best-fit difference (noderesources spans 100 points at weight 1), and weighs as much as
# a data-locality score (weight 2).
NVLINK_WEIGHT = 2.0
# Per pass: the most free GPUs in one island of each node (``IslandMasks.largest_free``).
LARGEST: StateKey[dict[str, Kept]] = StateKey("nvlink.largest_free")


def requires_one_island(job: Job) -> bool:
    wanted = job.spec.topology
    return wanted is not None and wanted.required and wanted.level == NVLINK


class IslandMasks:
    """The NVLink islands of a table's nodes as bitmasks, built once for the table's
    fixed parts (shared by its copies and backfill windows), so that the most free GPUs
    in one island of each node costs a few numpy passes plus one popcount per island of
    the partly used nodes with islands."""

    __slots__ = ("biggest", "has_gpus", "islanded", "masks", "nodes")

    def __init__(self, table: NodeTable) -> None:
        self.has_gpus = table.has_gpus
        self.nodes = table.nodes
        # rows of nodes with islands; their islands as GPU bitmasks; the largest island
        self.islanded: BoolArray = np.array([bool(n.gpu_islands) for n in table.nodes])
        self.masks: dict[int, tuple[int, ...]] = {}
        self.biggest = np.zeros(len(table), dtype=np.int64)
        for row in np.flatnonzero(self.islanded).tolist():
            whole = complete_islands(table.nodes[row].gpu_islands, int(table.cap_gpus[row]))
            self.masks[row] = tuple(sum(1 << g for g in island) for island in whole)
            self.biggest[row] = max((len(island) for island in whole), default=0)

    def largest_free(self, table: NodeTable, rows: IndexArray | None) -> IntArray:
        """The most free GPUs one island of each of ``rows`` (all when None) has; a node
        without islands is one island of all its GPUs.

        Backfill's tables of a future window carry that window's free counts but today's
        GPU-id map (``NodeTable.with_free``): a node whose GPUs are all free there counts
        with its whole islands; one partly taken is judged on today's ids (a job waiting
        for an island is then planned for when the node is empty, never too early)."""
        idx = np.arange(len(table)) if rows is None else rows
        free, islanded = table.free_gpus[idx], self.islanded[idx]
        out: IntArray = np.where(islanded, self.biggest[idx], free)
        partly = islanded & (free < table.cap_gpus[idx])
        used, masks = table.gpus_in_use, self.masks
        for k in np.flatnonzero(partly).tolist():
            row = int(idx[k])
            unused = ~used[row]
            out[k] = max((m & unused).bit_count() for m in masks[row])
        return out


class NvlinkIslands:
    name = NAME

    def __init__(self) -> None:
        self._masks: IslandMasks | None = None

    def masks_for(self, table: NodeTable) -> IslandMasks:
        """The table's ``IslandMasks``, kept for its ``has_gpus`` (fixed, shared by its
        copies and windows) and, as the server builds a new table every pass, from one
        pass to the next while the nodes are the same (building them takes about 30 ms on
        10,000 nodes with islands; comparing the nodes, 0.1 ms)."""
        found = self._masks
        if found is not None and found.has_gpus is table.has_gpus:
            return found
        if found is None or found.nodes != table.nodes:
            found = self._masks = IslandMasks(table)
        found.has_gpus = table.has_gpus
        return found

    def largest_free(self, ctx: PassContext) -> IntArray:
        """``IslandMasks.largest_free`` of every row of ``ctx.nodes``, kept through the
        pass: only the rows placements changed since the last call are redone."""
        cache = ctx.data.get(LARGEST)
        if cache is None:
            cache = {}
            ctx.data.write(LARGEST, cache)
        masks = self.masks_for(ctx.nodes)
        return kept_rows(cache, NAME, ctx.nodes, masks.largest_free)

    def lets_through(self, job: Job) -> bool:
        return not requires_one_island(job)

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        if job.spec.topology is None or not requires_one_island(job):  # (most: no call)
            return SKIP
        need = NodeRequest.for_job(job.spec, max(job.spec.nodes_min, 1)).gpus
        if need == 0:
            return SKIP
        table = ctx.nodes
        masks = self.masks_for(table)
        sizes = np.where(masks.islanded, masks.biggest, table.cap_gpus)  # no islands: one
        largest = int(sizes[table.partition_mask(job.partition)].max(initial=0))
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
            self.largest_free(ctx) >= request.gpus,
            PendingReason.RESOURCES,
            f"no NVLink island with {request.gpus} free GPUs (--topology required={NVLINK})",
        )

    def pre_score(
        self, ctx: PassContext, state: CycleState, job: Job, feasible: IndexArray
    ) -> Status:
        spec = job.spec
        if not (spec.gpus_per_node or spec.gpus_total or spec.gpus_per_task):
            return SKIP
        if requires_one_island(job) or not self.masks_for(ctx.nodes).masks:
            return SKIP
        return SUCCESS

    def score(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        request: NodeRequest,
        feasible: IndexArray,
    ) -> FloatArray:
        if request.gpus < 2:  # any free GPU is in some island
            return np.full(len(feasible), MAX_NODE_SCORE)
        fit = self.largest_free(ctx)[feasible] >= request.gpus
        return np.where(fit, MAX_NODE_SCORE, 0.0)


def new(args: PluginArgs) -> NvlinkIslands:
    reject_unknown_args(args, ())
    return NvlinkIslands()


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_FILTER: type[PreFilterPlugin] = NvlinkIslands
_WAIVER: type[PreFilterWaiver] = NvlinkIslands
_FILTER: type[FilterPlugin] = NvlinkIslands
_PRE_SCORE: type[PreScorePlugin] = NvlinkIslands
_SCORE: type[ScorePlugin] = NvlinkIslands
