"""Score nodes by where the job's ``--data`` inputs already are. See README.md.

PreScore skips jobs that name no inputs, passes without a data view, and jobs none of
whose keys any cache holds (nothing to prefer). Score gives each feasible node two
halves of 50 points:

* bytes: the share of the inputs' bytes the node's leaf cache already holds;
* movement: ``1 − penalty / worst``, where ``penalty`` is the estimated time to bring
  the rest from their nearest holders plus ``cost_weight`` seconds per unit of transfer
  cost (``hal.core.data.DataView.transfer_at``), and ``worst`` the same with every input
  read from the origin.

So 100 when the leaf holds everything, 0 when nothing is cached on the node's side, and
a copy one rack away scores well above the origin but well below a local copy: with the
default weight (2, beside best fit's 1) a local copy outweighs any packing preference.
Nodes sharing a leaf cache share a score, so the work is per leaf, not per node.

Permit (delay scheduling, Zaharia et al. 2010; off unless ``locality_wait`` > 0): a job
placed on nodes whose leaves hold a smaller share of its inputs' bytes than the best leaf
among the up nodes of its partition (busy or not) that it could run on (features, GPU
type, ``--exclude``, size; with ``--nodelist`` no better than its named nodes) waits —
``DataLocality``, holding nobody back — until such a node is free or it has been
eligible for ``locality_wait`` seconds; then it takes what is free.
"""

from __future__ import annotations

import numpy as np

from hal.core.data import DataView
from hal.core.job import Allocation, Job
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import (
    MAX_NODE_SCORE,
    FloatArray,
    IndexArray,
    PermitPlugin,
    PreScorePlugin,
    ScorePlugin,
)
from hal.scheduler.framework.node_table import BoolArray, NodeTable
from hal.scheduler.framework.profile import PluginArgs, PluginArgsError, reject_unknown_args
from hal.scheduler.framework.request import NodeRequest, big_enough, matching_nodes
from hal.scheduler.framework.status import SKIP, SUCCESS, Status, unschedulable

NAME = "datalocality"
DEFAULT_COST_WEIGHT_S = 1.0

# Per pass: each node row's leaf index (into the leaves tuple; None there: no cache).
LEAVES: StateKey[tuple[np.ndarray, tuple[str | None, ...]]] = StateKey("datalocality.leaves")
# Per pass, by the job's input keys: (score, share of the bytes held) per leaf.
BY_KEYS: StateKey[dict[tuple[str, ...], tuple[FloatArray, FloatArray]]] = StateKey(
    "datalocality.by_keys"
)


class DataLocality:
    name = NAME

    def __init__(
        self, cost_weight_s: float = DEFAULT_COST_WEIGHT_S, locality_wait_s: float = 0.0
    ) -> None:
        self.cost_weight_s = cost_weight_s
        self.locality_wait_s = locality_wait_s

    def pre_score(
        self, ctx: PassContext, state: CycleState, job: Job, feasible: IndexArray
    ) -> Status:
        view = ctx.snapshot.data
        keys = job.spec.data
        if not keys or view is None or all(view.size(k) is None for k in keys):
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
        view = ctx.snapshot.data
        if view is None:  # PreScore skips; kept for a direct call
            return np.zeros(len(feasible))
        rows, leaves = self._leaves(ctx, view)
        scores, _held = self._figures(ctx, view, job.spec.data, leaves)
        out: FloatArray = scores[rows[feasible]]
        return out

    def _figures(
        self,
        ctx: PassContext,
        view: DataView,
        keys: tuple[str, ...],
        leaves: tuple[str | None, ...],
    ) -> tuple[FloatArray, FloatArray]:
        """Score and Permit's per-leaf figures for ``keys``, once per pass."""
        cache = ctx.data.get(BY_KEYS)
        if cache is None:
            cache = {}
            ctx.data.write(BY_KEYS, cache)
        found = cache.get(keys)
        if found is None:
            found = cache[keys] = self.leaf_figures(view, keys, leaves)
        return found

    def leaf_figures(
        self, view: DataView, keys: tuple[str, ...], leaves: tuple[str | None, ...]
    ) -> tuple[FloatArray, FloatArray]:
        """Per leaf: the score (see the module docstring) and the share of the inputs'
        bytes the leaf holds."""
        scores = np.zeros(len(leaves))
        held = np.zeros(len(leaves))
        half = MAX_NODE_SCORE / 2
        for i, leaf in enumerate(leaves):
            t = view.transfer_at(keys, leaf)
            total = t.local_bytes + t.moved_bytes
            held[i] = t.local_bytes / total if total else 0.0
            worst = view.worst_at(keys, leaf)
            worst_p = worst.seconds + self.cost_weight_s * worst.cost
            if worst_p <= 0:
                continue
            penalty = t.seconds + self.cost_weight_s * t.cost
            scores[i] = half * held[i] + half * min(1.0, max(0.0, 1.0 - penalty / worst_p))
        return scores, held

    def permit(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        view = ctx.snapshot.data
        keys = job.spec.data
        if self.locality_wait_s <= 0 or not keys or view is None:
            return SUCCESS
        waited = ctx.now - job.eligible_since(ctx.now)
        if waited >= self.locality_wait_s:
            return SUCCESS
        rows, leaves = self._leaves(ctx, view)
        _scores, held = self._figures(ctx, view, keys, leaves)
        table = ctx.nodes
        got = min(float(held[rows[table.index[n]]]) for n in allocation.nodes)
        usable = self._could_take(table, job, len(allocation.nodes))
        best = float(held[rows[usable]].max()) if usable.any() else 0.0
        pinned = [table.index[n] for n in job.spec.nodelist if n in table.index]
        if pinned:  # in every allocation: no wait gets more than the least of them
            best = min(best, float(held[rows[pinned]].min()))
        if got >= best - 1e-9:
            return SUCCESS
        return unschedulable(
            PendingReason.DATA_LOCALITY,
            f"waiting up to {self.locality_wait_s - waited:.0f} s more for a node whose cache "
            f"holds {best:.0%} of its inputs (the free ones: {got:.0%})",
        )

    @staticmethod
    def _could_take(table: NodeTable, job: Job, n_nodes: int) -> BoolArray:
        """The up nodes of the job's partition it could run on once they are free: its
        features, GPU type, exclusions and per-node size (a node it can never use is not
        worth waiting for)."""
        request = NodeRequest.for_job(job.spec, n_nodes)
        return matching_nodes(table, job) & table.up & big_enough(table, request)

    def _leaves(
        self, ctx: PassContext, view: DataView
    ) -> tuple[np.ndarray, tuple[str | None, ...]]:
        found = ctx.data.get(LEAVES)
        if found is not None:
            return found
        index: dict[str | None, int] = {}
        rows = np.empty(len(ctx.nodes.names), dtype=np.intp)
        for row, name in enumerate(ctx.nodes.names):
            leaf = view.node_cache.get(name)
            rows[row] = index.setdefault(leaf, len(index))
        leaves = tuple(index)
        ctx.data.write(LEAVES, (rows, leaves))
        return rows, leaves


def new(args: PluginArgs) -> DataLocality:
    reject_unknown_args(args, ("cost_weight", "locality_wait"))
    weight = args.get("cost_weight", DEFAULT_COST_WEIGHT_S)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or weight < 0:
        raise PluginArgsError("cost_weight", "must be a number of seconds per cost unit >= 0")
    wait = args.get("locality_wait", 0)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or wait < 0:
        raise PluginArgsError("locality_wait", "must be a number of seconds >= 0 (0: off)")
    return DataLocality(float(weight), float(wait))


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_SCORE: type[PreScorePlugin] = DataLocality
_SCORE: type[ScorePlugin] = DataLocality
_PERMIT: type[PermitPlugin] = DataLocality
