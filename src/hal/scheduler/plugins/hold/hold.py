"""Jobs that may not start yet for their own reasons: held, or ``--begin`` in the future.

An admin hold is reported before a user hold because only the admin can release it, so it
is the one the user needs to hear about.
"""

from __future__ import annotations

from hal.core.clock import utc_text
from hal.core.job import Job
from hal.core.states import PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args
from hal.scheduler.framework.status import SUCCESS, Status, unschedulable

NAME = "hold"


class HoldAndBegin:
    name = NAME

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        if job.held_by_admin:
            return unschedulable(PendingReason.JOB_HELD_ADMIN, "held by an administrator", NAME)
        if job.spec.hold:
            return unschedulable(
                PendingReason.JOB_HELD_USER, "held by its user (scontrol release)", NAME
            )
        begin = job.spec.begin_time
        if begin is not None and begin > ctx.now:
            return unschedulable(
                PendingReason.BEGIN_TIME,
                f"may not start before {utc_text(begin)}",
                NAME,
                earliest_start=begin,
            )
        return SUCCESS


def new(args: PluginArgs) -> HoldAndBegin:
    reject_unknown_args(args, ())
    return HoldAndBegin()
