"""Slurm's ``OverSubscribe=USER`` (``--exclusive=user``): a node that holds such a job
holds no other user's job, both ways round:

* a job with ``--exclusive=user`` goes only on nodes where no other user's job runs;
* any job stays off nodes where another user's ``--exclusive=user`` job runs.

What holds a node is the snapshot's running jobs (``ctx.running``: in will-run, those
still running at the instant asked) plus the jobs placed earlier in this pass (Reserve
adds them), so two users' jobs placed in one pass cannot meet on a node either.

A backfill reservation planned on a future window sees the jobs running *now* (the
window does not say which of them will have ended by then), so it never plans one
user's job onto a node another user's job of the other kind holds now: such a job may
get no reservation until those jobs end. Main-pass and backfill starts are exact.

The verdict depends on the job's user, which its placement key leaves out: where this
filter takes a node away, it writes ``JOB_BOUND`` so that the pass does not reuse the
failure for another user's job of the same shape.

Its PreFilter answers SKIP (its Filter is not called) for a job without the option
while no such job holds a node: the usual pass, which pays nothing for the plugin.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from hal.core.job import Allocation, Job
from hal.core.preemption import holding
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import (
    FilterPlugin,
    FilterResult,
    PreFilterPlugin,
    PreFilterWaiver,
    ReservePlugin,
)
from hal.scheduler.framework.keys import JOB_BOUND
from hal.scheduler.framework.node_table import BoolArray
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.status import SKIP, SUCCESS, Status

NAME = "exclusiveuser"


@dataclass(slots=True)
class Holders:
    """Per node name, the users whose ``--exclusive=user`` jobs hold it (``exclusive``)
    and, once a job with ``--exclusive=user`` needs them, the users of every job holding
    it (``users``), as counts of jobs. ``placed``: Reserve's placements of this pass, to
    build ``users`` from when it is first needed (most passes never need it)."""

    exclusive: dict[str, Counter[str]] = field(default_factory=dict)
    users: dict[str, Counter[str]] | None = None
    placed: list[tuple[Job, tuple[str, ...], int]] = field(default_factory=list)

    def add(self, job: Job, nodes: tuple[str, ...], count: int) -> None:
        if job.spec.exclusive_user:
            _count(self.exclusive, job.spec.user, nodes, count)
        if self.users is None:
            self.placed.append((job, nodes, count))
        else:
            _count(self.users, job.spec.user, nodes, count)

    def every_user(self, running: tuple[Job, ...]) -> dict[str, Counter[str]]:
        if self.users is None:
            self.users = {}
            for job in running:
                alloc, _ = holding(job)
                if alloc is not None:
                    _count(self.users, job.spec.user, alloc.nodes, 1)
            for job, nodes, count in self.placed:
                _count(self.users, job.spec.user, nodes, count)
            self.placed.clear()
        return self.users


def _count(holders: dict[str, Counter[str]], user: str, nodes: tuple[str, ...], n: int) -> None:
    for node in nodes:
        counts = holders.setdefault(node, Counter())
        counts[user] += n
        if counts[user] <= 0:
            del counts[user]
            if not counts:
                del holders[node]


# Per pass: who holds each node (the running jobs, then Reserve's placements).
HOLDERS: StateKey[Holders] = StateKey("exclusiveuser.holders")


def _others(holders: dict[str, Counter[str]], user: str) -> list[str]:
    """The nodes some other user than ``user`` holds."""
    return [node for node, users in holders.items() if len(users) > 1 or user not in users]


class ExclusiveUser:
    name = NAME

    def __init__(self) -> None:
        # every node, for a job no user rule touches: shared, never written
        self._every_node: BoolArray = np.ones(0, dtype=np.bool_)

    def _holders(self, ctx: PassContext) -> Holders:
        found = ctx.data.get(HOLDERS)
        if found is None:
            found = Holders()
            for job in ctx.running:
                alloc, _ = holding(job)
                if alloc is not None and job.spec.exclusive_user:
                    _count(found.exclusive, job.spec.user, alloc.nodes, 1)
            ctx.data.write(HOLDERS, found)
        return found

    def lets_through(self, job: Job) -> bool:
        """Always: its PreFilter only says whether its Filter is called."""
        return True

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        """SKIP where no user rule can touch the job (the Filter is not called)."""
        if job.spec.exclusive_user or self._holders(ctx).exclusive:
            return SUCCESS
        return SKIP

    def filter(
        self, ctx: PassContext, state: CycleState, job: Job, request: NodeRequest
    ) -> FilterResult:
        holders = self._holders(ctx)
        user = job.spec.user
        taken = _others(holders.exclusive, user)
        if job.spec.exclusive_user:
            taken += _others(holders.every_user(ctx.running), user)
        table = ctx.nodes
        if not taken:
            if len(self._every_node) != len(table):
                self._every_node = np.ones(len(table), dtype=np.bool_)
            return FilterResult(self._every_node)
        feasible = np.ones(len(table), dtype=np.bool_)
        feasible[[table.index[n] for n in taken if n in table.index]] = False
        state.write(JOB_BOUND, True)
        return FilterResult(
            feasible, PendingReason.RESOURCES, "nodes held by other users' jobs (--exclusive=user)"
        )

    def reserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        self._holders(ctx).add(job, allocation.nodes, 1)
        return SUCCESS

    def unreserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> None:
        self._holders(ctx).add(job, allocation.nodes, -1)


def new(args: PluginArgs) -> ExclusiveUser:
    reject_unknown_args(args, ())
    return ExclusiveUser()


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_FILTER: type[PreFilterPlugin] = ExclusiveUser
_WAIVER: type[PreFilterWaiver] = ExclusiveUser
_FILTER: type[FilterPlugin] = ExclusiveUser
_RESERVE: type[ReservePlugin] = ExclusiveUser
