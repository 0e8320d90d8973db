"""Jobs that may not start yet for their own reasons: held, or ``--begin`` in the future;
and jobs that never may: past their ``--deadline`` (ended DEADLINE, as Slurm's).

An admin hold is reported before a user hold because only the admin can release it, so it
is the one the user needs to hear about.
"""

from __future__ import annotations

from hal.core.clock import utc_text
from hal.core.job import Job
from hal.core.states import JobState, PendingReason
from hal.scheduler.framework.context import PassContext
from hal.scheduler.framework.cycle_state import CycleState
from hal.scheduler.framework.interfaces import PreFilterPlugin, PreFilterWaiver
from hal.scheduler.framework.profile import PluginArgs, reject_unknown_args
from hal.scheduler.framework.status import SUCCESS, Code, Status, unschedulable

NAME = "hold"


class HoldAndBegin:
    name = NAME

    def lets_through(self, job: Job) -> bool:
        """No deadline, hold or begin time: nothing here can reject it."""
        spec = job.spec
        return (
            spec.deadline is None
            and not job.held_by_admin
            and not spec.hold
            and spec.begin_time is None
        )

    def pre_filter(self, ctx: PassContext, state: CycleState, job: Job) -> Status:
        late = past_deadline(job, ctx.now)
        if late:
            return Status(Code.UNRESOLVABLE, PendingReason.DEADLINE, late, NAME, JobState.DEADLINE)
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


def past_deadline(job: Job, now: float) -> str:
    """Why a pending job can no longer end by its ``--deadline``, as Slurm's test: now
    plus its ``--time-min`` (else its time limit; unlimited: nothing) is past it; "" if
    it still can, or has none."""
    deadline = job.spec.deadline
    if deadline is None:
        return ""
    need = job.spec.time_min_s or job.time_limit_s
    if now + need <= deadline:
        return ""
    took = f"{'--time-min' if job.spec.time_min_s else 'its time limit'} ({need} s)"
    return f"cannot end by its deadline {utc_text(deadline)} if started now: {took}"


def new(args: PluginArgs) -> HoldAndBegin:
    reject_unknown_args(args, ())
    return HoldAndBegin()


# The extension points this plugin serves, checked by mypy here (kube's ``var _
# FilterPlugin = &Fit{}``): a method missing or mistyped fails the type check, not a pass.
_PRE_FILTER: type[PreFilterPlugin] = HoldAndBegin
_WAIVER: type[PreFilterWaiver] = HoldAndBegin
