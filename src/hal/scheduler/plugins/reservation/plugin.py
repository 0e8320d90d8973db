"""The ``reservation`` plugin: jobs and advance reservations (``hal.core.reservation``).

* A job with ``--reservation=R`` runs only on R's nodes, only while a window of R is in
  force, and only if its time limit ends by that window's end, so it is never running
  when the window closes (PreFilter: reason ``Reservation`` until then; an unlimited job
  never fits, and the server refuses one at submit).
* Any other job may not use a node of a reservation whose window meets the job's run,
  ``[start, start + time limit)``; an unlimited job meets every later window (Filter:
  ``Resources``, or ``ReqNodeNotAvail, Reserved for maintenance`` when a ``MAINT``
  reservation is what keeps it from running: its ``--nodelist`` names a node of it, or
  enough nodes have the job's resources free but too few outside it. Slurm 22.05.8 says
  so then; were the nodes short anyway, the reason stays ``Resources``).

The run starts at ``ctx.now``, or at the instant backfill is planning for
(``framework.keys.PLAN_START``), so backfill never plans a job into a window it may
not use. Without reservations in the snapshot the plugin answers SKIP and costs nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from hal.core.clock import utc_text
from hal.core.job import Job
from hal.core.priority import PriorityPolicy
from hal.core.reservation import Reservation, judged_account
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import (
    FilterPlugin,
    FilterResult,
    PreFilterPlugin,
    PreFilterWaiver,
)
from hal.scheduler.framework.keys import PLAN_START
from hal.scheduler.framework.node_table import BoolArray, NodeTable
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args
from hal.scheduler.framework.request import NodeRequest
from hal.scheduler.framework.status import SKIP, SUCCESS, Status, unschedulable

NAME = "reservation"
# per pass: reservation name → its nodes as a mask over the table's rows
_MASKS: StateKey[dict[str, BoolArray]] = StateKey("reservation.masks")
# per pass: an ordinary job's run [t0, t1) → its Filter result (shared: never written)
_RESULTS: StateKey[dict[tuple[float, float], FilterResult]] = StateKey("reservation.outside")


def find(ctx: PassContext, name: str) -> Reservation | None:
    for r in ctx.snapshot.reservations:
        if r.name == name:
            return r
    return None


def _mask(ctx: PassContext, r: Reservation) -> BoolArray:
    masks = ctx.data.get(_MASKS)
    if masks is None:
        masks = {}
        ctx.data.write(_MASKS, masks)
    found = masks.get(r.name)
    if found is None:
        found = masks[r.name] = ctx.nodes.names_mask(r.nodes)
    return found


def fits(table: NodeTable, request: NodeRequest) -> BoolArray:
    """Nodes that are up and have ``request``'s resources free (as noderesources)."""
    t = table
    return request.fits(
        t.free_cpus, t.free_memory, t.free_gpus, t.jobs_on, t.exclusive_on, t.cap_memory, t.up
    )


class Reservations:
    name = NAME

    def __init__(self, defaults: Mapping[str, str] | None = None) -> None:
        # user → default account: a job naming no account is charged to it, and a
        # reservation's Accounts= admits it on that account (Slurm's rule)
        self._defaults: Mapping[str, str] = defaults or {}

    def lets_through(self, job: Job) -> bool:
        """A job naming no reservation: its PreFilter says SUCCESS or SKIP."""
        return not job.spec.reservation

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        wanted = job.spec.reservation
        if not wanted:
            return SUCCESS if ctx.snapshot.reservations else SKIP
        r = find(ctx, wanted)
        if r is None:
            return unschedulable(
                PendingReason.RESERVATION,
                f"reservation {wanted} does not exist (ended); move the job with "
                f"`scontrol update JobId={job.display_id} Reservation=` (none or another)",
                NAME,
            )
        account = judged_account(job.spec.account, job.spec.user, self._defaults)
        if not r.allows(job.spec.user, account):
            return unschedulable(
                PendingReason.RESERVATION,
                f"user {job.spec.user} (account {account or '(null)'}) "
                f"may not use reservation {r.name}",
                NAME,
            )
        planned = ctx.data.get(PLAN_START)
        now = ctx.now if planned is None else planned
        start, end = r.window_at(now)
        if end <= now:
            return unschedulable(PendingReason.RESERVATION, f"reservation {r.name} has ended", NAME)
        if start > now:
            return unschedulable(
                PendingReason.RESERVATION,
                f"waits for reservation {r.name} to start at {utc_text(start)}",
                NAME,
                earliest_start=start,
            )
        limit = job.time_limit_s
        if not limit:
            return unschedulable(
                PendingReason.RESERVATION,
                f"an unlimited job cannot fit in reservation {r.name}; give it a time "
                "limit (scontrol update JobId=... TimeLimit=...)",
                NAME,
            )
        if now + limit > end:
            return unschedulable(
                PendingReason.RESERVATION,
                f"time limit {limit}s runs past the end of reservation {r.name} at "
                f"{utc_text(end)}; it starts only when the whole limit fits in a window",
                NAME,
            )
        return SUCCESS

    def filter(
        self, ctx: PassContext, state: CycleState, job: Job, request: NodeRequest
    ) -> FilterResult:
        wanted = job.spec.reservation
        if wanted:
            r = find(ctx, wanted)
            if r is None:
                return FilterResult(np.zeros(len(ctx.nodes), dtype=np.bool_))
            # the reservation's own free nodes: a busy reservation holds back nobody
            # outside it (reason Reservation, not Resources)
            return FilterResult(
                _mask(ctx, r) & fits(ctx.nodes, request),
                PendingReason.RESERVATION,
                f"not free in reservation {r.name}",
            )
        start = ctx.data.get(PLAN_START)
        t0 = ctx.now if start is None else start
        limit = job.time_limit_s
        t1 = t0 + limit if limit else math.inf
        results = ctx.data.get(_RESULTS)
        if results is None:
            results = {}
            ctx.data.write(_RESULTS, results)
        found = results.get((t0, t1))
        if found is None:
            found = results[(t0, t1)] = self._outside(ctx, t0, t1)
        if found.reason is PendingReason.RESERVED_FOR_MAINTENANCE:
            return _maintenance(ctx, job, request, found)
        return found

    def _outside(self, ctx: PassContext, t0: float, t1: float) -> FilterResult:
        """The nodes of no reservation whose window meets ``[t0, t1)``."""
        allowed = np.ones(len(ctx.nodes), dtype=np.bool_)
        names: list[str] = []
        maintenance = False
        for r in ctx.snapshot.reservations:
            if r.overlaps(t0, t1):
                allowed &= ~_mask(ctx, r)
                names.append(r.name)
                maintenance = maintenance or r.maintenance
        if not names:
            return FilterResult(allowed)
        reason = PendingReason.RESERVED_FOR_MAINTENANCE if maintenance else PendingReason.RESOURCES
        return FilterResult(allowed, reason, f"reserved ({', '.join(names)})")


def _maintenance(
    ctx: PassContext, job: Job, request: NodeRequest, outside: FilterResult
) -> FilterResult:
    """``outside`` (the nodes of no reservation in the way, a MAINT one among those)
    with the reason Slurm gives: the maintenance one when it is the cause, so this
    filter is where the count falls short (the later resource filter would say
    ``Resources``); ``Resources`` when the nodes are short without it too."""
    reason = PendingReason.RESERVED_FOR_MAINTENANCE
    required = job.spec.nodelist
    if required and not outside.feasible[ctx.nodes.names_mask(required)].all():
        return FilterResult(np.zeros(len(ctx.nodes), dtype=np.bool_), reason, outside.message)
    # (judged in the job's partition, as the partition filter before this one does)
    free = fits(ctx.nodes, request) & ctx.nodes.partition_mask(job.partition)
    usable = outside.feasible & free
    if np.count_nonzero(usable) >= request.n_nodes:
        return outside
    if np.count_nonzero(free) < request.n_nodes:
        reason = PendingReason.RESOURCES
    return FilterResult(usable, reason, outside.message)


def new(args: PluginArgs, policy: PriorityPolicy | None = None) -> Reservations:
    """``policy``: ``hal.toml``'s ``[[users]]``, whose default accounts jobs naming no
    account are charged to (none: such a job has no account)."""
    reject_unknown_args(args, ())
    return Reservations(policy.default_accounts if policy is not None else None)


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_FILTER: type[PreFilterPlugin] = Reservations
_WAIVER: type[PreFilterWaiver] = Reservations
_FILTER: type[FilterPlugin] = Reservations
