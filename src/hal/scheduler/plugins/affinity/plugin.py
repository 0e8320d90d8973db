"""Declared placement rules between jobs: ``--near`` and ``--apart`` (``hal.core.job_rules``).
See README.md.

PreFilter resolves the job's rules against the jobs holding nodes (``holders.PassView``):
for each rule, which rows lie within its level of a target's node (``levels.Levels``).
A required near-rule whose target holds no node waits (UNSCHEDULABLE ``Affinity``; a
``job:ID`` that is neither pending nor running can never run again: UNRESOLVABLE),
unless the rule names the job's own group (its name, array or het job: the first of
them goes anywhere). A level the nodes do not have is ``BadConstraints`` (submit refuses
it; a node list that changed since may still lack it).

Filter keeps the job on rows within a required near-rule's level and off rows within a
required apart-rule's; and off rows within the level of a required ``--apart`` of any job
holding nodes whose rule names this job (the rule is kept both ways round, as
Kubernetes keeps required anti-affinity). Where it takes rows away it writes
``JOB_BOUND`` (the mask depends on more than the placement key) and gives reason
``Affinity``: the job waits on its own rules, holding nobody back.

PreScore/Score: preferred rules whose targets hold nodes score each feasible row by the
share of them it keeps (within a near-rule's level, outside an apart-rule's).

Reserve/Unreserve: a job placed in this pass becomes a target (and an owner of its
required apart-rules) for the jobs after it.

A job without rules, while no job holding nodes has a required apart-rule, gets SKIP at
PreFilter and PreScore: the usual pass pays one scan of the running jobs for it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hal.core.job import Allocation, Job
from hal.core.job_rules import JobRule
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
    ReservePlugin,
    ScorePlugin,
)
from hal.scheduler.framework.keys import JOB_BOUND
from hal.scheduler.framework.node_table import BoolArray
from hal.scheduler.framework.profile import PluginArgs, PluginArgsError, reject_unknown_args
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.status import SKIP, SUCCESS, Status, unresolvable, unschedulable
from hal.scheduler.plugins.affinity.holders import Holders, PassView
from hal.scheduler.plugins.affinity.levels import Levels

NAME = "affinity"
# Above best fit (noderesources, weight 1) and NVLink islands (2): a declared preference
# decides between nodes either would rank otherwise.
AFFINITY_WEIGHT = 3.0


@dataclass(frozen=True, slots=True)
class Resolved:
    """One rule of the job, resolved for this cycle: per row, within its level of a
    target's node (``inside``)."""

    option: str  # "near" or "apart"
    rule: JobRule
    inside: BoolArray

    @property
    def allowed(self) -> BoolArray:
        return self.inside if self.option == "near" else ~self.inside

    def __str__(self) -> str:
        return f"--{self.option}={self.rule}"


# Per pass: the running and placed jobs as rules see them.
VIEW: StateKey[PassView] = StateKey("affinity.view")
# Per pass: the ids ``job:ID`` may name among the pending jobs (built when first asked).
PENDING_IDS: StateKey[frozenset[int]] = StateKey("affinity.pending_ids")
# Per job: its rules with targets holding nodes (PreFilter), and Filter's mask and message.
RESOLVED: StateKey[tuple[Resolved, ...]] = StateKey("affinity.resolved")
MASK: StateKey[tuple[BoolArray, str] | None] = StateKey("affinity.mask")


class Affinity:
    name = NAME

    def __init__(self, level_names: tuple[str, ...] = ()) -> None:
        self.level_names = level_names
        # the levels of the last node list seen (by identity; swapped whole, never
        # changed in place: hal explain's dry runs share the plugin with the pass)
        self._levels: tuple[object, Levels] | None = None
        self._every_node: BoolArray = np.ones(0, dtype=np.bool_)

    def levels_for(self, ctx: PassContext) -> Levels:
        nodes = ctx.nodes.nodes
        found = self._levels
        if found is None or found[0] is not nodes:
            found = (nodes, Levels(nodes, self.level_names))
            self._levels = found
        return found[1]

    def _view(self, ctx: PassContext) -> PassView:
        found = ctx.data.get(VIEW)
        if found is None:
            found = PassView.of(ctx.running)
            ctx.data.write(VIEW, found)
        return found

    def _holders(self, ctx: PassContext) -> Holders:
        return self._view(ctx).index(ctx.nodes, ctx.running)

    # -- PreFilter --------------------------------------------------------------------

    def lets_through(self, job: Job) -> bool:
        """A job without --near/--apart rules: SKIP or SUCCESS (other jobs' rules are
        judged in Filter)."""
        return not job.spec.near and not job.spec.apart

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        spec = job.spec
        if not spec.near and not spec.apart:  # most jobs, every pass: inline, no calls
            view = ctx.data.get(VIEW)
            if view is None:
                view = self._view(ctx)
            if not view.apart:
                return SKIP
            return SUCCESS if view.owners_naming(job) else SKIP
        levels = self.levels_for(ctx)
        holders = self._holders(ctx)
        resolved: list[Resolved] = []
        for option, rules in (("near", spec.near), ("apart", spec.apart)):
            for rule in rules:
                domains = levels.domains(rule.level)
                if domains is None:
                    return unresolvable(
                        PendingReason.BAD_CONSTRAINTS,
                        f"--{option}={rule}: this cluster has no {rule.level!r} level; its "
                        f"levels are {', '.join(levels.known())}",
                        NAME,
                    )
                rows = holders.targets(rule, spec.user, job.id)
                if not len(rows):
                    if option == "near" and rule.required and not rule.names_itself(job):
                        return self._not_running(ctx, rule)
                    continue  # nothing to be near or apart from: any node keeps it
                marked = np.zeros(int(domains.max()) + 1, dtype=np.bool_)
                marked[domains[rows]] = True
                resolved.append(Resolved(option, rule, marked[domains]))
        state.write(RESOLVED, tuple(resolved))
        return SUCCESS

    def _not_running(self, ctx: PassContext, rule: JobRule) -> Status:
        """A required near-rule whose targets hold no node: wait for one to start, or,
        for a ``job:ID`` that is not even pending, never."""
        if rule.job_id:
            if rule.job_id not in self._pending_ids(ctx):
                return unresolvable(
                    PendingReason.AFFINITY,
                    f"--near={rule}: job {rule.job_id} is neither pending nor running, so "
                    "this job can never start beside it; cancel it, and submit it again "
                    "with another rule",
                    NAME,
                )
            return unschedulable(
                PendingReason.AFFINITY,
                f"--near={rule}: waiting for job {rule.job_id} to start",
                NAME,
            )
        return unschedulable(
            PendingReason.AFFINITY,
            f"--near={rule}: waiting for a job named {rule.name!r} to start",
            NAME,
        )

    def _pending_ids(self, ctx: PassContext) -> frozenset[int]:
        """The ids a ``job:ID`` rule may name among the pending jobs (their own, their
        arrays', their het jobs'), once per pass."""
        found = ctx.data.get(PENDING_IDS)
        if found is None:
            ids: set[int] = set()
            for j in ctx.snapshot.pending:
                ids.add(j.id)
                if j.array_job_id is not None:
                    ids.add(j.array_job_id)
                if j.spec.het is not None:
                    ids.add(j.spec.het.job_id)
            found = frozenset(ids)
            ctx.data.write(PENDING_IDS, found)
        return found

    # -- Filter -----------------------------------------------------------------------

    def filter(
        self, ctx: PassContext, state: CycleState, job: Job, request: NodeRequest
    ) -> FilterResult:
        if MASK in state:  # (asked again for another node count: the same answer)
            found = state.read(MASK)
        else:
            found = self._mask(ctx, state, job)
            state.write(MASK, found)
        if found is None:
            count = len(ctx.nodes)
            if len(self._every_node) != count:
                self._every_node = np.ones(count, dtype=np.bool_)
            return FilterResult(self._every_node)
        mask, message = found
        state.write(JOB_BOUND, True)
        return FilterResult(mask, PendingReason.AFFINITY, message)

    def _mask(self, ctx: PassContext, state: CycleState, job: Job) -> tuple[BoolArray, str] | None:
        """The rows the job's required rules, and the required apart-rules naming it,
        leave; None when they leave every row."""
        mask: BoolArray | None = None
        why: list[str] = []
        for each in state.get(RESOLVED) or ():
            if each.rule.required:
                allowed = each.allowed
                if not allowed.all():
                    mask = allowed.copy() if mask is None else mask & allowed
                    why.append(str(each))
        naming = self._view(ctx).owners_naming(job)
        if naming:
            levels = self.levels_for(ctx)
            holders = self._holders(ctx)
            for owner, rule in naming:
                domains = levels.domains(rule.level)
                rows = holders.rows.get(owner.id)
                if domains is None or rows is None or not len(rows):
                    continue
                marked = np.zeros(int(domains.max()) + 1, dtype=np.bool_)
                marked[domains[rows]] = True
                allowed = ~marked[domains]
                mask = allowed if mask is None else mask & allowed
                why.append(f"--apart={rule} of job {owner.display_id}")
        if mask is None or mask.all():
            return None
        return mask, "outside " + "; ".join(why)

    # -- Score ------------------------------------------------------------------------

    def pre_score(
        self, ctx: PassContext, state: CycleState, job: Job, feasible: IndexArray
    ) -> Status:
        resolved = state.get(RESOLVED)
        if not resolved or all(r.rule.required for r in resolved):
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
        preferred = [r for r in state.get(RESOLVED) or () if not r.rule.required]
        kept = np.zeros(len(feasible), dtype=np.float64)
        for each in preferred:
            kept += each.allowed[feasible]
        return kept * (MAX_NODE_SCORE / max(len(preferred), 1))

    # -- Reserve ----------------------------------------------------------------------

    def reserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        view = ctx.data.get(VIEW)  # (every placement of every pass: no more calls)
        (self._view(ctx) if view is None else view).add(job, allocation)
        return SUCCESS

    def unreserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> None:
        self._view(ctx).remove(job)


def new(args: PluginArgs) -> Affinity:
    reject_unknown_args(args, ("level_names",))
    names = args.get("level_names", [])
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise PluginArgsError("level_names", "must be a list of level names, leaf first")
    return Affinity(tuple(names))


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_FILTER: type[PreFilterPlugin] = Affinity
_WAIVER: type[PreFilterWaiver] = Affinity
_FILTER: type[FilterPlugin] = Affinity
_PRE_SCORE: type[PreScorePlugin] = Affinity
_SCORE: type[ScorePlugin] = Affinity
_RESERVE: type[ReservePlugin] = Affinity
