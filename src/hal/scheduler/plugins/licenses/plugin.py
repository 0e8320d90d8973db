"""A job holds the licenses it asks for (``-L matlab:2``) while it runs; at most the
cluster's count of each (``[licenses]`` in ``hal.toml``, Slurm's ``Licenses=``) are held
at a time.

What is held is the running jobs' licenses plus those of jobs placed earlier in this
pass (Reserve adds them), so a pass never hands out more than there are. A job short of
a license waits with reason ``Licenses``; it holds no nodes back for itself meanwhile
and backfill plans no reservation for it (as Slurm's backfill without ``bf_licenses``),
so a job asking many may wait while jobs asking fewer keep taking them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from hal.core.job import Allocation, Job, licenses_held
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState, StateKey
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args
from hal.scheduler.framework.status import SUCCESS, Status, unresolvable, unschedulable

NAME = "licenses"

# license name → held (the snapshot's running jobs, then those placed this pass)
HELD: StateKey[Counter[str]] = StateKey("licenses.held")


class Licenses:
    name = NAME

    def __init__(self, total: Mapping[str, int]) -> None:
        self.total = dict(total)

    def _held(self, ctx: PassContext) -> Counter[str]:
        held = ctx.data.get(HELD)
        if held is None:
            held = licenses_held(ctx.running)
            ctx.data.write(HELD, held)
        return held

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        wanted = job.spec.licenses
        if not wanted:
            return SUCCESS
        held = self._held(ctx)
        for name, count in wanted:
            total = self.total.get(name, 0)
            if count > total:  # (refused at submit; the config may have changed since)
                return unresolvable(
                    PendingReason.LICENSES,
                    f"asks {count} {name} license(s), the cluster has {total}",
                    NAME,
                )
            free = total - held[name]
            if count > free:
                return unschedulable(
                    PendingReason.LICENSES,
                    f"{name}: {count} wanted, {max(free, 0)} of {total} free",
                    NAME,
                )
        return SUCCESS

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


def new(args: PluginArgs, total: Mapping[str, int]) -> Licenses:
    reject_unknown_args(args, ())
    return Licenses(total)
