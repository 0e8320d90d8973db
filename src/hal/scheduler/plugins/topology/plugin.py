"""Topology-aware placement of multi-node jobs on the switch tree. See README.md.

PreFilter checks what does not depend on what is running: a ``--topology`` level the
tree does not have, or a ``required`` level whose largest domain has fewer nodes of the
partition than the job needs (both ``BadConstraints``, UNRESOLVABLE).

PlacementGenerate (after Score, multi-node jobs only) picks the node set with
``place.choose``: one leaf when one fits, otherwise the fewest leaves under the lowest
switch. On a block topology (the nodes' paths come from blocks: ``TreeIndex.blocks``)
it uses ``place.choose_block`` instead, as Slurm's topology/block: the smallest
(aggregated) block that holds the job, the one with the least free capacity among those
(best fit). Levels then count base blocks (0, ``block``) and their aggregations
(``level1``...), and ``--switches=N`` counts base blocks. Then the job's own requests:

* ``--topology required=LEVEL``: only inside one domain of that level; none with enough
  free nodes now → UNSCHEDULABLE ``Resources`` (the partition waits behind the job, as
  for any shortage, and backfill may reserve for it);
* ``--topology preferred=LEVEL``: inside one domain of that level when one fits now,
  even if spanning a higher switch would use fewer leaves; otherwise as by default;
* ``--switches=N[@max-wait]``: when the best placement now spans more than ``N``
  leaves, wait (UNSCHEDULABLE ``Topology``, holding nobody back) until one with at most
  ``N`` exists or the job has waited ``max-wait`` since it became eligible (default and
  cap: ``max_switch_wait``, Slurm's SchedulerParameters option, 300 s), then take any.
  The wait's end is the job's expected start (``squeue --start``) unless backfill gives
  one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hal.core.gpu_islands import NVLINK
from hal.core.job import Job
from hal.core.node import Node
from hal.core.states import PendingReason
from hal.core.topology import BLOCK, level_index
from hal.core.topology_labels import LABEL_LEVELS
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import (
    IndexArray,
    PlacementGeneratePlugin,
    PreFilterPlugin,
    PreFilterWaiver,
)
from hal.scheduler.framework.profile import PluginArgs, PluginArgsError, reject_unknown_args
from hal.scheduler.framework.status import (
    SKIP,
    SUCCESS,
    Status,
    unresolvable,
    unschedulable,
)
from hal.scheduler.plugins.topology.place import (
    choose,
    choose_block,
    fitting_domains,
    free_per_leaf,
)
from hal.scheduler.plugins.topology.tree import IntArray, TreeIndex

NAME = "topology"
DEFAULT_MAX_SWITCH_WAIT_S = 300  # Slurm's max_switch_wait default

# Per job: the level its --topology names (resolved by PreFilter).
LEVEL: StateKey[int] = StateKey("topology.level")
# Per pass: the tree index of the pass's nodes (fixed for the pass).
INDEX: StateKey[TreeIndex] = StateKey("topology.index")
# Per pass: each row's NVLink domain as an id (ids in name order; -1: none).
DOMAINS: StateKey[IntArray] = StateKey("topology.nvlink_domains")


class TopologyPlacement:
    name = NAME

    def __init__(
        self,
        level_names: tuple[str, ...] = (),
        max_switch_wait_s: int = DEFAULT_MAX_SWITCH_WAIT_S,
    ) -> None:
        self.level_names = level_names
        self.max_switch_wait_s = max_switch_wait_s
        # The index of the last node list seen, kept across passes and keyed by the
        # nodes' paths: the server builds a new node tuple every pass, but the tree
        # rarely changes (comparing the paths is cheaper than rebuilding the index).
        self._nodes: Sequence[Node] | None = None
        self._key: tuple[tuple[str, ...], ...] | None = None
        self._index: TreeIndex | None = None
        self._domain_nodes: Sequence[Node] | None = None
        self._domain_codes: IntArray = np.empty(0, dtype=np.intp)

    def index_for(self, ctx: PassContext) -> TreeIndex:
        found = ctx.data.get(INDEX)
        if found is not None:
            return found
        nodes = ctx.nodes.nodes
        if self._index is None or nodes is not self._nodes:
            key = tuple(n.topology or ("~" + n.name,) for n in nodes)
            if self._index is None or key != self._key:
                self._index = TreeIndex.from_nodes(nodes)
                self._key = key
            self._nodes = nodes
        ctx.data.write(INDEX, self._index)
        return self._index

    def _level(self, name: str, index: TreeIndex) -> int | None:
        if index.blocks and name == BLOCK and name not in self.level_names:
            return 0
        labels = index.label_levels
        if labels and name not in self.level_names:
            # a label tree: rack is level 0, zone 1, region 2, site 3 (fixed depth), and
            # only the levels some node is labelled with exist
            return LABEL_LEVELS.index(name) if name in labels else None
        level = level_index(name, self.level_names, index.top)
        # a configured name above this tree's top: the whole tree is one such domain
        return None if level is None else min(level, index.top)

    # -- PreFilter --------------------------------------------------------------------

    def lets_through(self, job: Job) -> bool:
        return job.spec.topology is None

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        wanted = job.spec.topology
        if wanted is None:
            return SUCCESS
        if wanted.level == NVLINK:  # inside a node: plugin nvlink; across nodes: here
            return self._pre_filter_nvlink(ctx, job, wanted.required)
        index = self.index_for(ctx)
        level = None if index.flat else self._level(wanted.level, index)
        if level is None and index.flat:
            return unresolvable(
                PendingReason.BAD_CONSTRAINTS,
                f"--topology {wanted}: this cluster has no topology levels (no switch "
                "tree, blocks or rack/zone/region/site labels); only nvlink applies",
                NAME,
            )
        if level is None:
            known = ", ".join(self._level_names(index))
            return unresolvable(
                PendingReason.BAD_CONSTRAINTS,
                f"unknown topology level {wanted.level!r}; this cluster's levels are {known}",
                NAME,
            )
        state.write(LEVEL, level)
        if wanted.required and index.n_leaves:
            rows = np.flatnonzero(ctx.nodes.partition_mask(job.partition))
            largest = int(index.domain_counts(rows, level).max()) if len(rows) else 0
            need = max(job.spec.nodes_min, 1)
            if need > largest:
                return unresolvable(
                    PendingReason.BAD_CONSTRAINTS,
                    f"--topology {wanted}: the largest {wanted.level} domain of partition "
                    f"{job.partition} has {largest} node(s), the job needs {need}",
                    NAME,
                )
        return SUCCESS

    def _pre_filter_nvlink(self, ctx: PassContext, job: Job, required: bool) -> Status:
        """A multi-node ``required=nvlink`` job larger than every NVLink domain of its
        partition can never run (BadConstraints). A partition without domains keeps the
        per-node meaning only (each node's GPUs from one island)."""
        need = max(job.spec.nodes_min, 1)
        if need < 2 or not required:
            return SUCCESS
        codes = self.domains_for(ctx)[ctx.nodes.partition_mask(job.partition)]
        codes = codes[codes >= 0]
        if not len(codes):
            return SUCCESS
        largest = int(np.bincount(codes).max())
        if need > largest:
            return unresolvable(
                PendingReason.BAD_CONSTRAINTS,
                f"--topology required=nvlink: the largest NVLink domain of partition "
                f"{job.partition} has {largest} node(s), the job needs {need}",
                NAME,
            )
        return SUCCESS

    def _nvlink_domain(
        self, ctx: PassContext, job: Job, ranked: IndexArray, count: int
    ) -> Sequence[IndexArray] | Status | None:
        """``count`` rows of one multi-node NVLink domain: the domain with the fewest
        feasible nodes that still has ``count`` (best fit, so whole domains stay free for
        big jobs; ties: the lowest name), in node-score order. None when the job's
        partition has no domains (then the job is placed as any other, as PreFilter
        decided: a GPU partition elsewhere having domains does not make it wait)."""
        codes = self.domains_for(ctx)
        if not len(codes) or codes[ctx.nodes.partition_mask(job.partition)].max(initial=-1) < 0:
            return None
        of = codes[ranked]
        free = np.bincount(of[of >= 0], minlength=int(codes.max()) + 1)
        fits = np.flatnonzero(free >= count)
        if not len(fits):
            wanted = job.spec.topology
            if wanted is not None and not wanted.required:
                return None
            return unschedulable(
                PendingReason.RESOURCES,
                f"--topology {wanted}: no NVLink domain has {count} free nodes",
                NAME,
            )
        # np.argmin takes the first (lowest id, so lowest name) among equal counts
        domain = int(fits[int(np.argmin(free[fits]))])
        return (ranked[of == domain][:count],)

    def domains_for(self, ctx: PassContext) -> IntArray:
        """Each row's NVLink domain id for this pass (cached on the node tuple)."""
        found = ctx.data.get(DOMAINS)
        if found is not None:
            return found
        nodes = ctx.nodes.nodes
        if self._domain_nodes is not nodes:
            names = [n.nvlink_domain for n in nodes]
            ids = {d: i for i, d in enumerate(sorted(set(names) - {""}))}
            self._domain_codes = np.array([ids.get(d, -1) for d in names], dtype=np.intp)
            self._domain_nodes = nodes
        ctx.data.write(DOMAINS, self._domain_codes)
        return self._domain_codes

    def _level_names(self, index: TreeIndex) -> list[str]:
        if index.label_levels:
            return [*index.label_levels, NVLINK]
        top = index.top
        leaf = BLOCK if index.blocks else "leaf"
        names = list(self.level_names[:top])
        names += [leaf if k == 0 else f"level{k}" for k in range(len(names), top)]
        return names

    # -- PlacementGenerate ------------------------------------------------------------

    def generate(
        self, ctx: PassContext, state: CycleState, job: Job, ranked: IndexArray, count: int
    ) -> Sequence[IndexArray] | Status:
        spec = job.spec
        if spec.topology is not None and spec.topology.level == NVLINK:
            found = self._nvlink_domain(ctx, job, ranked, count)
            if found is not None:
                return found
        index = self.index_for(ctx)
        if index.flat:  # no topology: node-score order, as without this plugin
            return SKIP
        free = free_per_leaf(index, ranked)
        top = index.top
        wanted = spec.topology
        if wanted is not None:
            level = state.get(LEVEL)
            if level is None:  # PreFilter was not run (a profile without it first)
                level = self._level(wanted.level, index)
            if level is not None:
                fits = len(fitting_domains(index, free, level, count)) > 0
                if wanted.required and not fits:
                    return unschedulable(
                        PendingReason.RESOURCES,
                        f"--topology {wanted}: no {wanted.level} domain has {count} free nodes",
                        NAME,
                    )
                if fits:
                    top = level
        place = choose_block if index.blocks else choose
        choice = place(index, ranked, count, top, free)
        if choice is None:  # cannot happen at the core level: Filter found count rows
            return SKIP
        if spec.switches and choice.leaves > spec.switches:
            waited = ctx.now - job.eligible_since(ctx.now)
            limit = self.max_switch_wait_s
            if spec.switch_wait_s is not None:
                limit = min(limit, spec.switch_wait_s)
            if waited < limit:
                # the wait's end is the earliest start squeue --start shows: then it
                # takes any placement (if the nodes are still free)
                return unschedulable(
                    PendingReason.TOPOLOGY,
                    f"--switches={spec.switches}: the best placement now spans "
                    f"{choice.leaves} leaf switches; waiting up to {limit - waited:.0f} s "
                    "more for a better one",
                    NAME,
                    earliest_start=ctx.now + (limit - waited),
                )
        return (choice.rows,)


def new(args: PluginArgs) -> TopologyPlacement:
    reject_unknown_args(args, ("level_names", "max_switch_wait"))
    names = args.get("level_names", [])
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise PluginArgsError("level_names", "must be a list of level names, leaf first")
    wait = args.get("max_switch_wait", DEFAULT_MAX_SWITCH_WAIT_S)
    if isinstance(wait, bool) or not isinstance(wait, int) or wait < 0:
        raise PluginArgsError("max_switch_wait", "must be a whole number of seconds >= 0")
    return TopologyPlacement(tuple(names), wait)


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_FILTER: type[PreFilterPlugin] = TopologyPlacement
_WAIVER: type[PreFilterWaiver] = TopologyPlacement
_PLACEMENT_GENERATE: type[PlacementGeneratePlugin] = TopologyPlacement
