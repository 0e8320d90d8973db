"""A job holds the licenses it asks for (``-L matlab:2``) while it runs; at most the
cluster's count of each (``[licenses]`` in ``hal.toml``, Slurm's ``Licenses=``) are held
at a time.

What is held is the running jobs' licenses plus those of jobs placed earlier in this
pass (Reserve adds them), so a pass never hands out more than there are. A job short of
a license waits with reason ``Licenses``.

Licenses are the framework's counted resource (``CountedResourcePlugin``: ``counts`` is
a job's ``-L``), so the pass holds later jobs asking the same licenses back behind one
short of them, and backfill plans licenses over time (as Slurm's ``bf_licenses``): while
it tries a job, it gives the run it plans (``keys.PLAN_START`` or now, to
``keys.PLAN_END``) and the licenses held over time (``keys.COUNTS_OVER_TIME``, under this
plugin's name: running jobs until their planned ends, jobs started or reserved by the
stage until theirs). The job then passes only if its licenses are
free all through that run; otherwise the verdict names the first instant from which
they are (``earliest_start``, for a run planned later than now), where backfill goes on
looking for its reservation. So a job short of licenses gets a reservation from when
they are back, and no job backfilled now takes licenses that delay it.

A het job holds the licenses of all its components at once: while ``place_group``
places one (``keys.GROUP``), its first component is judged for every component's
licenses together (``matlab:2`` in each of two components: 4), the others for their own.
So a het job asking more in all than the cluster has is refused for good, and backfill
plans and reserves its licenses as the sum they are.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from hal.core.job import Allocation, Job, licenses_held
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.counted import Counts
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.interfaces import (
    CountedResourcePlugin,
    PreFilterPlugin,
    ReservePlugin,
)
from hal.scheduler.framework.keys import COUNTS_OVER_TIME, GROUP, PLAN_END, PLAN_START
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args
from hal.scheduler.framework.status import SUCCESS, Status, unresolvable, unschedulable

NAME = "licenses"

# license name → held (the snapshot's running jobs, then those placed this pass)
HELD: StateKey[Counter[str]] = StateKey("licenses.held")


class Licenses:
    name = NAME
    reason = PendingReason.LICENSES  # (CountedResource: a job short of licenses)

    def __init__(self, total: Mapping[str, int]) -> None:
        self.total = dict(total)

    def counts(self, job: Job) -> Counts:
        return job.spec.licenses

    def _held(self, ctx: PassContext) -> Counter[str]:
        held = ctx.data.get(HELD)
        if held is None:
            held = licenses_held(ctx.running)
            ctx.data.write(HELD, held)
        return held

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        wanted, het = _wanted(ctx, job)
        if not wanted:
            return SUCCESS
        data = ctx.data
        later = data.get(PLAN_START)  # backfill plans the job's run from then, not now
        held = self._held(ctx) if later is None else None
        in_all = f" (het job {het} in all)" if het is not None else ""
        for name, count in wanted:
            total = self.total.get(name, 0)
            if count > total:  # (refused at submit; the config may have changed since)
                asks = f"het job {het} asks" if het is not None else "asks"
                return unresolvable(
                    PendingReason.LICENSES,
                    f"{asks} {count} {name} license(s)"
                    + (" in all" if het is not None else "")
                    + f", the cluster has {total}",
                    NAME,
                )
            if held is None:
                continue
            free = total - held[name]
            if count > free:
                return unschedulable(
                    PendingReason.LICENSES,
                    f"{name}: {count} wanted{in_all}, {max(free, 0)} of {total} free",
                    NAME,
                )
        planned = data.get(COUNTS_OVER_TIME)
        end = data.get(PLAN_END)
        if planned is None or end is None:
            return SUCCESS  # not planned by backfill: now is all that counts
        over_time = planned[self.name]
        start = ctx.now if later is None else later
        fits_from = over_time.earliest(wanted, self.total, start, end - start)
        if fits_from == start:
            return SUCCESS
        short = next(
            (n, c) for n, c in wanted if over_time.most_held(n, start, end) + c > self.total[n]
        )
        free = self.total[short[0]] - over_time.most_held(short[0], start, end)
        return unschedulable(
            PendingReason.LICENSES,
            f"{short[0]}: {short[1]} wanted{in_all}, {max(free, 0)} of "
            f"{self.total[short[0]]} free through its planned run (the rest held or kept "
            "for jobs ahead)",
            NAME,
            # (a run planned from now keeps its own verdict: that it is short now)
            earliest_start=None if later is None else fits_from,
        )

    def reserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> Status:
        self._count(ctx, job, 1)
        return SUCCESS

    def unreserve(
        self, ctx: PassContext, state: CycleState, job: Job, allocation: Allocation
    ) -> None:
        self._count(ctx, job, -1)

    def _count(self, ctx: PassContext, job: Job, sign: int) -> None:
        """``job``'s licenses added to (1) or taken from (-1) what this pass holds."""
        if job.spec.licenses:
            held = self._held(ctx)
            for name, count in job.spec.licenses:
                held[name] = max(0, held[name] + sign * count)


def _wanted(ctx: PassContext, job: Job) -> tuple[Counts, int | None]:
    """What ``job`` is judged for: its own licenses; or, when it is the first component
    of the het job ``place_group`` is placing, every component's together, with the het
    job's id. (The later components' cycles see the earlier ones' licenses neither over
    time nor, in TEST_ONLY, through Reserve; this judges the sum once, the others' own
    counts then fit too.)"""
    group = ctx.data.get(GROUP)
    if group is None or len(group) < 2 or group[0].id != job.id or job.spec.het is None:
        return job.spec.licenses, None
    summed: Counter[str] = Counter()
    for member in group:
        for name, count in member.spec.licenses:
            summed[name] += count
    return tuple(sorted(summed.items())), job.spec.het.job_id


def new(args: PluginArgs, total: Mapping[str, int]) -> Licenses:
    reject_unknown_args(args, ())
    return Licenses(total)


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_FILTER: type[PreFilterPlugin] = Licenses
_RESERVE: type[ReservePlugin] = Licenses
_COUNTED_RESOURCE: type[CountedResourcePlugin] = Licenses
