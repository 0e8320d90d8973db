"""Does the job fit on a node, and which nodes should it prefer.

PreFilter works out, once per placement key (all elements of an array share one), the
*static* mask: nodes of the partition that are UP, carry every ``--constraint`` feature,
match ``gpu_type``, and are not ``--exclude``d. It also decides the two verdicts that do
not depend on what is running:

* the job could never fit, even on an empty cluster with every node UP → UNRESOLVABLE,
  ``BadConstraints`` (the server rejects these at submit; this is the safety net);
* a ``--nodelist`` node is DOWN or DRAIN → UNSCHEDULABLE, ``ReqNodeNotAvail``.

Filter then only compares the free arrays with the request (a few numpy ops over all
nodes). Score prefers fuller nodes (best fit) so that big jobs find empty nodes later;
jobs that need no GPU prefer nodes without GPUs for the same reason.
"""

from __future__ import annotations

import numpy as np

from hal.core.job import Job
from hal.core.states import NodeState, PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterResult,
    FloatArray,
    IndexArray,
)
from hal.scheduler.framework.node_table import BoolArray, NodeTable
from hal.scheduler.framework.profile import PluginArgs, PluginArgsError, reject_unknown_args
from hal.scheduler.framework.request import NodeRequest, PlacementKey, placement_key
from hal.scheduler.framework.runtime import PLACEMENT_KEY
from hal.scheduler.framework.status import SUCCESS, Status, unresolvable, unschedulable

NAME = "noderesources"
STRATEGIES = ("best_fit", "spread")

# Per job: the static mask Filter starts from.
STATIC_MASK: StateKey[BoolArray] = StateKey("noderesources.static_mask")
# Per pass: request → its part of the best-fit score on every node.
JOB_SHARE: StateKey[dict[NodeRequest, FloatArray]] = StateKey("noderesources.job_share")
# Per pass: placement key → static mask, or the verdict that stops every such job.
BY_KEY: StateKey[dict[PlacementKey, BoolArray | Status]] = StateKey("noderesources.by_key")


def _fits_capacity(table: NodeTable, request: NodeRequest) -> BoolArray:
    """Nodes big enough for ``request`` when empty."""
    mask = table.cap_cpus >= request.cpus
    if request.memory_bytes:
        mask &= table.cap_memory >= request.memory_bytes
    if request.gpus:
        mask &= table.cap_gpus >= request.gpus
    return mask


class NodeResourcesFit:
    name = NAME

    def __init__(self, strategy: str = "best_fit") -> None:
        self.strategy = strategy

    # -- PreFilter --------------------------------------------------------------------

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        cache = ctx.data.get(BY_KEY)
        if cache is None:
            cache = {}
            ctx.data.write(BY_KEY, cache)
        key = state.get(PLACEMENT_KEY) or placement_key(job)
        found = cache.get(key)
        if found is None:
            found = cache[key] = self._static(ctx.nodes, job)
        if isinstance(found, Status):
            return found
        state.write(STATIC_MASK, found)
        return SUCCESS

    def _static(self, table: NodeTable, job: Job) -> BoolArray | Status:
        spec = job.spec
        candidates = table.partition_mask(job.partition).copy()
        for feature in spec.constraint:
            candidates &= table.feature_mask(feature)
        if spec.gpu_type and (spec.gpus_per_node or spec.gpus_total or spec.gpus_per_task):
            candidates &= np.array([m == spec.gpu_type for m in table.gpu_model], dtype=np.bool_)
        if spec.exclude:
            candidates &= ~table.names_mask(spec.exclude)

        required = table.names_mask(spec.nodelist)
        unknown = [n for n in spec.nodelist if n not in table.index]
        if unknown:
            return unresolvable(
                PendingReason.BAD_CONSTRAINTS,
                f"unknown nodes in --nodelist: {','.join(unknown)}",
                NAME,
            )
        if (required & ~candidates).any():
            bad = [table.names[i] for i in np.flatnonzero(required & ~candidates)]
            return unresolvable(
                PendingReason.BAD_CONSTRAINTS,
                f"--nodelist nodes {','.join(bad)} are excluded, outside partition "
                f"{job.partition} or lack the requested features",
                NAME,
            )

        # Could it ever fit? Node state is ignored: a DOWN node may come back.
        lo = max(spec.nodes_min, len(spec.nodelist), 1)
        hi = max(spec.nodes_max, lo)
        possible = False
        for n in range(lo, hi + 1):
            big_enough = candidates & _fits_capacity(table, NodeRequest.for_job(spec, n))
            if np.count_nonzero(big_enough) >= n and not (required & ~big_enough).any():
                possible = True
                break
        if not possible:
            req = NodeRequest.for_job(spec, lo)
            return unresolvable(
                PendingReason.BAD_CONSTRAINTS,
                f"no {lo} node(s) in partition {job.partition} can ever give "
                f"{req.cpus} cpus, {req.memory_bytes or 0} bytes, {req.gpus} gpus each"
                + (f" with features {','.join(spec.constraint)}" if spec.constraint else ""),
                NAME,
            )

        if spec.nodelist:
            down = [n for n in spec.nodelist if table.state[table.index[n]] is not NodeState.UP]
            if down:
                return unschedulable(
                    PendingReason.REQ_NODE_NOT_AVAIL,
                    f"requested nodes not available: {','.join(down)}",
                    NAME,
                )
        return candidates & table.up

    # -- Filter -----------------------------------------------------------------------

    def filter(
        self, ctx: PassContext, state: CycleState, job: Job, request: NodeRequest
    ) -> FilterResult:
        t = ctx.nodes
        fit = state.read(STATIC_MASK) & (t.free_cpus >= request.cpus)
        if request.memory_bytes is None:
            fit &= t.free_memory >= t.cap_memory  # --mem=0: all of it must be free
        elif request.memory_bytes:
            fit &= t.free_memory >= request.memory_bytes
        if request.gpus:
            fit &= t.free_gpus >= request.gpus
        if request.exclusive:
            fit &= t.jobs_on == 0
        else:
            fit &= t.exclusive_on == 0
        return FilterResult(fit, PendingReason.RESOURCES)

    # -- Score ------------------------------------------------------------------------

    def score(
        self,
        ctx: PassContext,
        state: CycleState,
        job: Job,
        request: NodeRequest,
        feasible: IndexArray,
    ) -> FloatArray:
        t = ctx.nodes
        # Best fit = fraction of the node in use after placing the job, CPU and memory
        # averaged, scaled to [0, 100]: 100 - 50*(free shares) + 50*(the job's shares).
        # The job's part is the same for every identical job, so it is cached per
        # request; per job only the free part is computed, over all nodes, then one
        # gather (cheaper than gathering every input first).
        cache = ctx.data.get(JOB_SHARE)
        if cache is None:
            cache = {}
            ctx.data.write(JOB_SHARE, cache)
        base = cache.get(request)
        if base is None:
            share = request.cpus * t.inv_cpus
            if request.memory_bytes is not None:
                share = share + request.memory_bytes * t.inv_memory
            base = cache[request] = MAX_NODE_SCORE + (MAX_NODE_SCORE / 2) * share
        if request.memory_bytes is None:
            # --mem=0 needs all memory free and takes it all: the memory terms cancel.
            free = t.free_cpus * t.inv_cpus
        else:
            free = t.free_cpus * t.inv_cpus + t.free_memory * t.inv_memory
        score: FloatArray = (base - (MAX_NODE_SCORE / 2) * free)[feasible]
        if self.strategy == "spread":
            score = MAX_NODE_SCORE - score
        now = ctx.present_nodes
        if now is not None and now is not t:
            # Planning a future window (a backfill reservation): among nodes that fit it
            # equally well, take those busy *now*, and leave the idle ones to jobs that can
            # backfill into them (classic EASY's "extra nodes"). Worth less than one
            # point, so it only breaks ties.
            score = score + 0.5 * (1.0 - now.free_cpus * now.inv_cpus)[feasible]
        if request.gpus == 0 and t.any_gpus:
            # Keep GPU nodes for GPU jobs: any node without GPUs outranks any with.
            half = score * 0.5
            score = np.where(t.has_gpus[feasible], half, half + MAX_NODE_SCORE / 2)
        return score


def new(args: PluginArgs) -> NodeResourcesFit:
    reject_unknown_args(args, ("score",))
    strategy = args.get("score", "best_fit")
    if strategy not in STRATEGIES:
        raise PluginArgsError("score", f"must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
    return NodeResourcesFit(str(strategy))
