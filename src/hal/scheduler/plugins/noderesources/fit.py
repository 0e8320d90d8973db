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

On a large table (``NodeTable.version`` not None) both keep their last result per
request and redo only the rows taken or released since (``kept_rows``): a placement changes
a few nodes, so the next job's mask and scores cost a few rows, not 10,000.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numpy as np

from hal.core.job import Job
from hal.core.states import NodeState, PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterPlugin,
    FilterResult,
    FloatArray,
    IndexArray,
    PreFilterPlugin,
    ScorePlugin,
)
from hal.scheduler.framework.keys import PLACEMENT_KEY
from hal.scheduler.framework.node_table import BoolArray, NodeTable
from hal.scheduler.framework.profile import PluginArgs, PluginArgsError, reject_unknown_args
from hal.scheduler.framework.request import (
    NodeRequest,
    PlacementKey,
    big_enough,
    matching_nodes,
    node_counts,
    placement_key,
)
from hal.scheduler.framework.status import SUCCESS, Status, unresolvable, unschedulable

_K = TypeVar("_K")
Compute = Callable[[NodeTable, "IndexArray | None"], np.ndarray]

NAME = "noderesources"
STRATEGIES = ("best_fit", "spread")

# Per job: the static mask Filter starts from.
STATIC_MASK: StateKey[BoolArray] = StateKey("noderesources.static_mask")
# Per pass: request → its part of the best-fit score on every node.
JOB_SHARE: StateKey[dict[NodeRequest, FloatArray]] = StateKey("noderesources.job_share")
# Static masks (or the verdict that stops every such job) kept per placement key, at most
# this many (then they start over): 5,000 nodes make 5 kB a mask.
_STATIC_KEPT = 4096
# Per pass: the last Filter mask and Score array per (key, request) and request, with the
# table and its version they were computed on (see ``Kept``).
FITS: StateKey[dict[tuple[PlacementKey, NodeRequest], Kept]] = StateKey("noderesources.fits")
SCORES: StateKey[dict[NodeRequest, Kept]] = StateKey("noderesources.scores")
# Kept results per pass, at most (then they start over): a mask and a score array per
# request, one byte and eight per node, so 50,000 nodes × 64 × 9 bytes is 29 MB at worst.
# (The synthetic 50,000-job queue of ``hal bench sched-pass`` has 36 distinct requests.)
_KEEP = 64
_RESOURCES = PendingReason.RESOURCES  # (an enum lookup costs 80 ns on Python 3.11)


class Kept:
    """A per-node result kept from one call to the next on the same table: the next
    call recomputes only the rows taken or released since (``NodeTable.changed_rows``)
    into a copy, so an array once returned never changes. The rows of the copy are
    computed by the same expressions as a full computation, element by element, so the
    values are exactly those a full computation would give."""

    __slots__ = ("table", "value", "version")

    def __init__(self, table: NodeTable, version: int, value: np.ndarray) -> None:
        self.table = table
        self.version = version
        self.value = value


def kept_rows(cache: dict[_K, Kept], key: _K, table: NodeTable, compute: Compute) -> np.ndarray:
    """``compute(table, rows)`` over all rows (``rows`` None), or, for a table seen
    before under ``key``, over the rows that changed since."""
    version = table.version
    if version is None:  # not tracked: a read-only table (a backfill window), or small
        return compute(table, None)
    found = cache.get(key)
    if found is not None and found.table is table:
        rows = table.changed_rows(found.version)
        if rows is not None:
            if len(rows):
                value = found.value.copy()
                value[rows] = compute(table, rows)
                found.value, found.version = value, version
            return found.value
    if len(cache) >= _KEEP:
        cache.clear()
    value = compute(table, None)
    cache[key] = Kept(table, version, value)
    return value


class NodeResourcesFit:
    name = NAME

    def __init__(self, strategy: str = "best_fit") -> None:
        self.strategy = strategy
        empty = np.zeros(0)
        self._bonus: tuple[BoolArray, FloatArray] = (empty.astype(np.bool_), empty)
        # placement key → static mask or verdict, for the tables sharing one ``up``
        # array: it reads only the parts of a table that copies share and nobody writes
        # (names, partitions, features, states), so it holds from pass to pass while the
        # caller keeps copying one table (the simulator) and starts over with a table
        # built anew (the server, every pass).
        self._static_kept: tuple[BoolArray, dict[PlacementKey, BoolArray | Status]] = (
            empty.astype(np.bool_),
            {},
        )

    # -- PreFilter --------------------------------------------------------------------

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        table = ctx.nodes
        up, cache = self._static_kept
        if up is not table.up:
            cache = {}
            self._static_kept = (table.up, cache)
        key = state.get(PLACEMENT_KEY) or placement_key(job)
        found = cache.get(key)
        if found is None:
            if len(cache) >= _STATIC_KEPT:
                cache.clear()
            found = cache[key] = self._static(table, job)
        if isinstance(found, Status):
            return found
        state.write(STATIC_MASK, found)
        return SUCCESS

    def _static(self, table: NodeTable, job: Job) -> BoolArray | Status:
        spec = job.spec
        candidates = matching_nodes(table, job)

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

        if not table.partition_mask(job.partition).any():
            return unresolvable(
                PendingReason.BAD_CONSTRAINTS,
                f"partition {job.partition} has no nodes: none of the nodes it names has "
                "registered (sinfo -N lists the nodes; scontrol show partition its names)",
                NAME,
            )
        # Could it ever fit? Node state is ignored: a DOWN node may come back.
        counts = node_counts(spec, table)
        lo = counts.start
        possible = False
        for n in counts:
            fits = candidates & big_enough(table, NodeRequest.for_job(spec, n))
            if np.count_nonzero(fits) >= n and not (required & ~fits).any():
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
        static = state.read(STATIC_MASK)
        key = state.get(PLACEMENT_KEY)
        table = ctx.nodes
        if key is None or table.version is None:
            # called outside a cycle (nothing to key a kept mask by), or a table whose
            # changes are not tracked (small, or a backfill window): all rows
            return FilterResult(_fit(table, request, static, None), _RESOURCES)

        def compute(t: NodeTable, rows: IndexArray | None) -> BoolArray:
            return _fit(t, request, static, rows)

        cache = ctx.data.get(FITS)
        if cache is None:
            cache = {}
            ctx.data.write(FITS, cache)
        fit = kept_rows(cache, (key, request), table, compute)
        return FilterResult(fit, _RESOURCES)

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
        now = ctx.present_nodes
        if now is None or now is t:
            # The main pass: the whole score per node, kept per request from one job to
            # the next (only the rows the last placements changed are redone) on a
            # table that tracks its changes.
            if t.version is None:
                whole: FloatArray = self._score(t, request, base, None)[feasible]
                return whole
            kept = ctx.data.get(SCORES)
            if kept is None:
                kept = {}
                ctx.data.write(SCORES, kept)

            def compute(table: NodeTable, rows: IndexArray | None) -> FloatArray:
                return self._score(table, request, base, rows)

            full: FloatArray = kept_rows(kept, request, t, compute)[feasible]
            return full
        score = self._free_part(t, request, base, None)[feasible]
        # Planning a future window (a backfill reservation): among nodes that fit it
        # equally well, take those busy *now*, and leave the idle ones to jobs that can
        # backfill into them (classic EASY's "extra nodes"). Worth less than one point,
        # so it only breaks ties.
        score = score + 0.5 * (1.0 - now.free_cpus * now.inv_cpus)[feasible]
        return self._gpu_part(t, request, score, feasible)

    def _score(
        self, t: NodeTable, request: NodeRequest, base: FloatArray, rows: IndexArray | None
    ) -> FloatArray:
        """The score of ``rows`` (all when None), without the "busy now" tie-break."""
        return self._gpu_part(t, request, self._free_part(t, request, base, rows), rows)

    def _free_part(
        self, t: NodeTable, request: NodeRequest, base: FloatArray, rows: IndexArray | None
    ) -> FloatArray:
        fc, ic, fm, im = t.free_cpus, t.inv_cpus, t.free_memory, t.inv_memory
        if rows is not None:
            fc, ic, fm, im, base = fc[rows], ic[rows], fm[rows], im[rows], base[rows]
        # --mem=0 needs all memory free and takes it all: the memory terms cancel.
        free = fc * ic if request.memory_bytes is None else fc * ic + fm * im
        score: FloatArray = base - (MAX_NODE_SCORE / 2) * free
        if self.strategy == "spread":
            score = MAX_NODE_SCORE - score
        return score

    def _gpu_part(
        self, t: NodeTable, request: NodeRequest, score: FloatArray, rows: IndexArray | None
    ) -> FloatArray:
        if request.gpus == 0 and t.any_gpus:
            # Keep GPU nodes for GPU jobs: any node without GPUs outranks any with (half
            # the score, plus half the maximum on nodes without; + 0.0 on the others
            # leaves the value as it is).
            bonus = self._no_gpu_bonus(t)
            score = score * 0.5 + (bonus if rows is None else bonus[rows])
        return score

    def _no_gpu_bonus(self, t: NodeTable) -> FloatArray:
        """MAX_NODE_SCORE / 2 on nodes without GPUs, 0.0 on the others; kept for the
        table's ``has_gpus`` (fixed, shared by its copies and windows)."""
        has_gpus, bonus = self._bonus
        if has_gpus is not t.has_gpus:
            bonus = np.where(t.has_gpus, 0.0, MAX_NODE_SCORE / 2)
            self._bonus = (t.has_gpus, bonus)
        return bonus


def _fit(
    t: NodeTable, request: NodeRequest, static: BoolArray, rows: IndexArray | None
) -> BoolArray:
    """Filter's mask over ``rows`` (all when None)."""
    if rows is None:
        return request.fits(t.free_cpus, t.free_memory, t.free_gpus, t.jobs_on,
                            t.exclusive_on, t.cap_memory, static)  # fmt: skip
    return request.fits(
        t.free_cpus[rows],
        t.free_memory[rows] if request.memory_bytes != 0 else t.free_memory,
        t.free_gpus[rows] if request.gpus else t.free_gpus,
        t.jobs_on[rows] if request.exclusive else t.jobs_on,
        t.exclusive_on[rows] if not request.exclusive else t.exclusive_on,
        t.cap_memory[rows] if request.memory_bytes is None else t.cap_memory,
        static[rows],
    )


def new(args: PluginArgs) -> NodeResourcesFit:
    reject_unknown_args(args, ("score",))
    strategy = args.get("score", "best_fit")
    if strategy not in STRATEGIES:
        raise PluginArgsError("score", f"must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
    return NodeResourcesFit(str(strategy))


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_FILTER: type[PreFilterPlugin] = NodeResourcesFit
_FILTER: type[FilterPlugin] = NodeResourcesFit
_SCORE: type[ScorePlugin] = NodeResourcesFit
